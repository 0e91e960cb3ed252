"""No host-device synchronisation in a steady-state decode step, counted per step on CPU.

``HostSyncCounter`` (a dispatch mode) counts the ops that would make the host wait for
a GPU: ``.item()``/``int(t)``/``bool(t)``, ``.tolist()``, nonzero and boolean-mask
indexing, host data made into tensors, cross-device copies. Before this engine
(``kronos_core/engine/generate.py`` of the 19:58 main) a steady decode step had 1
(greedy, unpadded) to 5 (seeded, rows recomputed) of them; now it has none. Step 0
(tokenize, prefill, the seeded draws moved to the device once), steps where rows are
evicted, and the last step (detokenize) may have a few.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from series_helpers import windows

from kronos_core import KronosPredictor
from kronos_core.base.options import ForecastOptions
from kronos_core.engine import sampling, top_p_rows
from kronos_core.engine.sampling import counter_uniforms, counter_uniforms_table, row_keys
from kronos_core.engine.syncs import HostSyncCounter, syncs_per_step


@torch.inference_mode()  # how the engine runs (tolist() dispatches resolve_conj only there)
def test_the_counter_sees_what_synchronises():
    x = torch.arange(6)
    syncing = {
        "int(t)": lambda: int(x.max()),
        "item": lambda: x.sum().item(),
        "tolist": lambda: x.tolist(),
        "mask index": lambda: x[x > 2],
        "torch.tensor": lambda: torch.tensor([1, 2]),
        "bool(t)": lambda: bool(x.any()),
        "nonzero": lambda: torch.nonzero(x),
    }
    for name, op in syncing.items():
        with HostSyncCounter() as c:
            op()
        assert c.total >= 1, name
    with HostSyncCounter() as quiet:
        y = x * 2 + 1
        rows = torch.arange(3, device=x.device)
        # stay on the device
        y[rows], y.index_copy_(0, rows, x[:3]), x[2:4], y.sum(), torch.where(x > 2, x, y)
    assert quiet.total == 0, quiet.ops
CASES = {
    # name: (lookbacks, max_context, sliding, options)
    "seeded-ragged": (
        [64, 40, 90], 128, "exact", ForecastOptions(10, sample_count=2, top_p=0.9, seed=7),
    ),
    "greedy-unpadded": ([64, 64], 128, "exact", ForecastOptions(10, top_k=1, top_p=1.0)),
    "unseeded-topk": ([50, 30], 128, "exact", ForecastOptions(10, top_k=20, temperature=0.8)),
    "rolling-slides": ([60, 75], 64, "rolling", ForecastOptions(10, seed=3)),
    # row 0 recomputed from step 7
    "exact-slides": ([58, 40], 64, "exact", ForecastOptions(10, seed=3)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_steady_decode_steps_do_not_synchronise(tiny, goog, case):
    lookbacks, mc, sliding, options = CASES[case]
    predictor = KronosPredictor(*tiny, device="cpu", max_context=mc, sliding=sliding)
    values, xs, ys = windows(goog, [0, 500, 1000][: len(lookbacks)], lookbacks, options.horizon)
    job = predictor.start_forecast(values, xs, ys, options)
    steps = job.generation.cache_steps
    counts = syncs_per_step(job)
    assert len(counts) == options.horizon
    # steady: a decode step (not the prefill, not the last, which detokenizes) that evicts no row
    steady = [s for s in range(1, options.horizon - 1) if not steps[s].evict]
    assert steady and all(counts[s] == 0 for s in steady), counts
    assert counts[0] <= 3 and counts[-1] <= 2  # tokenize/prefill; detokenize
    assert job.result().paths.shape == (len(lookbacks), options.sample_count, options.horizon, 6)


TOP_P_HORIZON = 8


def _second_top_p_step(tiny, goog):
    """A seeded top-p forecast of two series on a CPU, prefilled, its second step counted ->
    (predictor, job, the counter of that step)."""
    options = ForecastOptions(TOP_P_HORIZON, top_p=0.9, seed=5)
    predictor = KronosPredictor(*tiny, device="cpu", max_context=128)
    values, xs, ys = windows(goog, [0, 500], [64, 64], options.horizon)
    job = predictor.start_forecast(values, xs, ys, options)
    job.step()  # tokenize and prefill
    counter = HostSyncCounter()
    with counter:
        job.step()
    return predictor, job, counter


def test_the_cpu_top_p_reads_back_per_draw_what_the_gpu_count_leaves_out(tiny, goog, monkeypatch):
    """On a CPU a seeded top-p step drawn the tensor way (``KRONOS_TOP_P_ROWS=0``) reads back,
    for each of its s1 and s2 draws, which rows its candidates leave unsettled (this random
    model's flat rows) and whether theirs reach top_p before the whole-row sort. Here the
    candidates are the wider ``TOP_P_CANDIDATES`` only: at the prefill's draws the first,
    narrower cut settled no row (a count read back then), so both routes skip it for a while
    (``CandidateRoute``). ``syncs_per_step`` counts what a GPU step does, where rows are sorted
    whole."""
    monkeypatch.setenv("KRONOS_TOP_P_ROWS", "0")
    predictor, job, counter = _second_top_p_step(tiny, goog)
    assert dict(counter.ops) == {"index": 2, "item": 2}, counter.ops
    assert all(route.skip_first for route in predictor.generator.candidate_routes)
    assert sampling.TOP_P_CANDIDATES > 0
    assert syncs_per_step(job)[:-1] == [0] * (TOP_P_HORIZON - 3)
    assert sampling.TOP_P_CANDIDATES > 0  # restored after counting


@pytest.mark.skipif(not top_p_rows.available(), reason="numba is not installed")
def test_the_compiled_cpu_top_p_reads_back_one_count_per_draw(tiny, goog):
    """Drawn compiled (``top_p_rows``), a CPU's seeded top-p step reads back one thing per s1
    and s2 draw: which rows its candidates left to the tensor path (none here: this random
    model's flat rows lie within its candidates' binades). Beside it the counter sees the
    kernel's zero-copy numpy views (logits, probabilities, uniforms: ``resolve_conj`` and
    ``resolve_neg`` each) and its tokens taken back (``lift_fresh``)."""
    predictor, job, counter = _second_top_p_step(tiny, goog)
    views = {"resolve_conj": 6, "resolve_neg": 6, "lift_fresh": 2}
    assert dict(counter.ops) == {"nonzero": 2, **views}, counter.ops
    assert not any(route.skip_first for route in predictor.generator.candidate_routes)


def test_the_seeded_draws_table_is_the_counter_draws():
    keys = row_keys(11, [3, 5, 8], 2)
    table = counter_uniforms_table(keys, 6)  # (H, 2, N)
    assert table.shape == (6, 2, 6)
    for step in range(6):
        for kind in (0, 1):
            np.testing.assert_array_equal(
                table[step, kind], counter_uniforms(keys, step, kind).numpy()
            )
