"""The compiled top-p draw (``kronos_core.engine.top_p_rows``): the tensor path's tokens, the
rows it leaves to that path, and ``sample_tokens`` with it on and off."""

from __future__ import annotations

import pytest
import torch

from kronos_core.engine import top_p_rows
from kronos_core.engine.sampling import (
    SamplingParams,
    _draw_from_candidates,
    _inverse_cdf,
    _top_p_candidates,
    filter_logits,
    sample_tokens,
)

pytestmark = pytest.mark.skipif(not top_p_rows.available(), reason="numba is not installed")


def _rows(g: torch.Generator, n: int, v: int, trial: int) -> torch.Tensor:
    """(n, v) logits: flat to peaked rows, ties on some trials."""
    scales = torch.tensor([0.3, 1.0, 2.5, 6.0, 12.0])[torch.arange(n) % 5][:, None]  # (n, 1)
    logits = torch.randn(n, v, generator=g) * scales
    return logits.round() if trial % 4 == 0 else logits


def _reference_draw(row: torch.Tensor, top_p: float, u: float) -> int:
    """One row by the definition, step by step: sorted most likely first, the float32
    cumulative probability (float64 sums), the least likely kept logit, every token tied with it
    kept, inverse CDF over the kept tokens' float32 probabilities in vocabulary order."""
    probs = torch.softmax(row, -1)  # (V,) float32
    order = torch.sort(row, descending=True, stable=True).indices
    cumulative = probs[order].double().cumsum(-1).float()  # (V,)
    within = int((cumulative[:-1] <= top_p).sum())
    kept = row >= row[order[within]]
    cdf = torch.where(kept, probs, 0.0).double().cumsum(-1)  # (V,)
    passed = (cdf > u * cdf[-1]) & kept
    return int(passed.nonzero()[0]) if passed.any() else int(kept.nonzero()[-1])


@pytest.mark.parametrize("v", [7, 50, 1024, 4096])
@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.97])
def test_the_compiled_draw_gives_the_tensor_paths_tokens(v, top_p):
    """Every row settled here draws ``_draw_from_candidates``' token (the whole-row draw's):
    vocabularies of 7 to 4,096, flat and peaked rows, temperatures 0.7 and 1. Rows of tied
    logits: the definition's token (``_reference_draw``), which keeps every token tied with the
    least likely kept one, as the tensor path's candidates do (its whole-row sort, for flat rows
    its candidates do not settle, may keep some of them only)."""
    g = torch.Generator().manual_seed(v + int(top_p * 100))
    for trial in range(12):
        scaled = _rows(g, 64, v, trial) / (0.7 if trial % 3 == 0 else 1.0)
        u = torch.rand(64, generator=g, dtype=torch.float64)
        compiled = top_p_rows.draw(scaled, top_p, u)
        assert bool((compiled >= 0).all()), trial  # these rows' candidates settle them all
        by_definition = [_reference_draw(scaled[i], top_p, float(u[i])) for i in range(64)]
        assert compiled.tolist() == by_definition, trial
        if trial % 4:  # no ties
            assert torch.equal(compiled, _draw_from_candidates(scaled, top_p, u)), trial
            whole = _inverse_cdf(_top_p_candidates(scaled, top_p)[1].double(), u)
            assert torch.equal(compiled, whole), trial


def test_a_mass_below_the_first_candidates_is_drawn_from_the_wide_ones_and_a_nan_row_is_left():
    """A row whose mass lies mostly in tokens far below its most likely one (65,535 tokens at
    2**-16 of it, beside one holding half the mass): the first candidates (``BINADES``) fall
    short of top_p, the wide ones (``WIDE_BINADES``) settle it with the definition's token. A NaN
    row comes back -1, and ``sample_tokens`` draws it the tensor way; the rows beside them draw
    as alone."""
    v = 1 << 16
    g = torch.Generator().manual_seed(1)
    tail = torch.zeros(v)
    tail[0] = torch.log(torch.tensor(float(v - 1)))  # token 0 holds half the mass
    probs = torch.softmax(tail, -1)
    assert float(probs[1] / probs[0]) < 2.0**-top_p_rows.BINADES  # below the first candidates
    nan = torch.full((v,), float("nan"))
    peaked = torch.randn(2, v, generator=g) * 12.0
    scaled = torch.stack([peaked[0], tail, nan, peaked[1]])  # (4, V)
    u = torch.rand(4, generator=g, dtype=torch.float64)
    compiled = top_p_rows.draw(scaled, 0.9, u)
    assert compiled[1].item() == _reference_draw(tail, 0.9, float(u[1]))
    assert compiled[2].item() == -1
    assert torch.equal(compiled[[0, 3]], _draw_from_candidates(scaled[[0, 3]], 0.9, u[[0, 3]]))
    tokens = sample_tokens(scaled, SamplingParams(top_p=0.9), u)
    assert torch.equal(tokens[[0, 1, 3]], compiled[[0, 1, 3]])
    assert tokens[2].item() == _draw_from_candidates(scaled[2:3], 0.9, u[2:3]).item()


def test_a_rows_token_does_not_depend_on_the_rows_beside_it():
    g = torch.Generator().manual_seed(2)
    scaled = _rows(g, 40, 1024, 1)
    u = torch.rand(40, generator=g, dtype=torch.float64)
    together = top_p_rows.draw(scaled, 0.9, u)
    alone = torch.cat([top_p_rows.draw(scaled[i:i + 1], 0.9, u[i:i + 1]) for i in range(40)])
    assert torch.equal(together, alone)


def test_every_token_drawn_is_in_the_kept_set_and_u_picks_it_by_the_cdf():
    """Small cases by hand: probabilities 0.5, 0.3, 0.15, 0.05 at top_p 0.7 keep the first two
    (weights 0.5 and 0.3 of 0.8): u below 0.625 draws token 0, above it token 1, u next to 1 the
    last kept token."""
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()[None].repeat(4, 1)  # (4, 4)
    u = torch.tensor([0.0, 0.62, 0.63, 1.0 - 2.0**-53], dtype=torch.float64)
    assert top_p_rows.draw(logits, 0.7, u).tolist() == [0, 0, 1, 1]
    kept = torch.isfinite(filter_logits(logits, SamplingParams(top_p=0.7)))
    assert kept[0].tolist() == [True, True, False, False]


def test_switched_off_sample_tokens_draws_the_same_tokens_the_tensor_way(monkeypatch):
    g = torch.Generator().manual_seed(5)
    logits = _rows(g, 64, 1024, 1)
    u = torch.rand(64, generator=g, dtype=torch.float64)
    params = SamplingParams(temperature=0.8, top_p=0.9)
    compiled = sample_tokens(logits, params, u)
    monkeypatch.setenv("KRONOS_TOP_P_ROWS", "0")
    assert not top_p_rows.available()
    assert torch.equal(sample_tokens(logits, params, u), compiled)


def test_a_vocabulary_over_the_packed_keys_is_refused():
    with pytest.raises(ValueError, match="vocabulary"):
        top_p_rows.draw(torch.zeros(1, (1 << 21) + 1), 0.9, torch.zeros(1, dtype=torch.float64))


def test_a_failing_kernel_is_compiled_afresh_then_switched_off_and_the_tensor_draw_serves(
    monkeypatch, caplog
):
    """A first failure of the compiled kernel (numba's stale on-disk cache, say) is retried once;
    a second switches the compiled draw off in the process with a warning, and ``sample_tokens``
    draws the tensor path's tokens."""
    g = torch.Generator().manual_seed(8)
    logits = _rows(g, 32, 1024, 1)
    u = torch.rand(32, generator=g, dtype=torch.float64)
    params = SamplingParams(top_p=0.9)
    expected = _draw_from_candidates(logits, 0.9, u)
    kernel, calls = top_p_rows._draw_rows, []

    def fails_once(*arrays):
        calls.append(len(calls))
        if len(calls) == 1:
            raise AttributeError("Can't get attribute '_gone' on <module top_p_rows>")
        kernel(*arrays)

    monkeypatch.setattr(top_p_rows, "_draw_rows", fails_once)
    assert torch.equal(sample_tokens(logits, params, u), expected)
    assert calls == [0, 1] and top_p_rows.available()

    def always_fails(*arrays):
        raise RuntimeError("no compiler")

    monkeypatch.setattr(top_p_rows, "_draw_rows", always_fails)
    monkeypatch.setattr(top_p_rows, "_off_because", [])
    with caplog.at_level("WARNING", logger="kronos_core.engine.top_p_rows"):
        assert torch.equal(sample_tokens(logits, params, u), expected)
    assert not top_p_rows.available()
    assert "compiled top-p draw is off" in caplog.text and "no compiler" in caplog.text
    assert torch.equal(sample_tokens(logits, params, u), expected)  # the tensor draw from now on


def test_without_a_writable_cache_the_kernel_compiles_uncached(monkeypatch):
    """numba refuses ``cache=True`` where it finds no writable place for its cache: a kernel is
    then compiled without one (again in each process)."""
    import numba

    njit = numba.njit

    def no_cache(*args, **kwargs):
        if kwargs.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file 'f.py'")
        return njit(*args, **kwargs)

    monkeypatch.setattr(numba, "njit", no_cache)

    def add_one(x):
        return x + 1

    compiled = top_p_rows._jit(add_one)
    assert compiled(41) == 42 and compiled is not add_one and hasattr(compiled, "py_func")
