"""Exactness under the replica's step scheduler, on the reference fixture checkpoints: a seeded
series' paths are identical whatever it shared the device with and whenever it joined (windows of
the bundled GOOG daily candles), and greedy forecasts still equal the reference's, with other jobs
interleaved step by step (``service.replica.step_runner.StepRunner``), on each parity fixture
(GOOG bundled, A-share from the shared folder). Each runs twice: every job stepping alone
(``max_step_rows`` 0), and jobs sharing decode steps (continuous batching; the test checks that
steps were shared)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kronos_core.base.candles import FEATURES
from kronos_core.base.options import ForecastOptions
from kronos_core.predictor import KronosPredictor
from service.common.messages import Shard, ShardResult
from service.replica.step_runner import StepRunner

GREEDY = dict(temperature=1.0, top_k=1, top_p=1.0, sample_count=1)


def _window(df: pd.DataFrame, start: int, lookback: int, horizon: int):
    part = df.iloc[start : start + lookback + horizon]
    values = part[list(FEATURES)].to_numpy(np.float32)[:lookback]  # (L, 6)
    ts = part["timestamps"].to_numpy("datetime64[ns]")
    return values, ts[:lookback], ts[lookback:]


def _shard(df, starts, lookbacks, options: ForecastOptions, request_id: str) -> Shard:
    wins = [_window(df, s, lb, options.horizon) for s, lb in zip(starts, lookbacks)]
    return Shard(
        request_id, 0, [w[0] for w in wins], [w[1] for w in wins], [w[2] for w in wins], options,
        return_paths=True,
    )


SHARING = {"alone": 0, "shared": 10_000}  # max_step_rows: every job steps alone; jobs share steps


def _run(
    runner: StepRunner, arrivals: list[tuple[int, Shard]], can_share: bool = True
) -> dict[str, ShardResult]:
    """Submit each shard after ``ticks`` steps of the step loop; run until every one is
    answered. Steps were shared exactly when the runner shares them and ``can_share``."""
    out: dict[str, ShardResult] = {}
    tick = 0
    for ticks, shard in sorted(arrivals, key=lambda a: a[0]):
        while tick < ticks:
            runner.tick()
            tick += 1
        runner.submit(shard, lambda res: out.__setitem__(res.request_id, res))
    runner.run_until_idle()
    assert all(r.error is None for r in out.values()), [r.error for r in out.values()]
    shared = sum(rep.shared_steps for rep in runner.take_reports())
    assert (shared > 0) == (runner.policy.max_step_rows > 0 and can_share), shared
    return out


@pytest.fixture(scope="module")
def predictor(tiny):
    return KronosPredictor(*tiny, device="cpu", max_context=128, clip=5)


SEEDED = ForecastOptions(horizon=6, sample_count=3, seed=42, top_p=0.9)


@pytest.mark.parametrize("steps", SHARING)
@pytest.mark.parametrize("joined_at", [0, 3])
@pytest.mark.parametrize("company", ["alone", "coalesced"])
def test_seeded_paths_do_not_depend_on_company_or_joining_time(
    predictor, goog, joined_at, company, steps
):
    starts, lookbacks = [300, 900], [90, 40]
    lone = predictor.forecast(*(_shard(goog, starts, lookbacks, SEEDED, "x").__dict__[k]
                                for k in ("values", "x_timestamps", "y_timestamps")), SEEDED).paths
    runner = StepRunner(predictor, "r", "cpu", max_skipped=2, max_step_rows=SHARING[steps])
    big = _shard(
        goog, range(0, 2000, 250), [120] * 8, ForecastOptions(horizon=8, sample_count=2, seed=7),
        "big",
    )
    other = _shard(
        goog, [1500, 1700], [70, 128], ForecastOptions(horizon=3, sample_count=1, seed=1), "other"
    )
    # the series share one job with others of the same options (no longer
    if company == "coalesced":
        # than they are: a longer series pads the job wider, which moves floats at 1e-7, tokens
        # stay)
        mine = _shard(goog, [1200, *starts, 2000], [60, *lookbacks, 90], SEEDED, "mine")
        pick = slice(1, 3)
    else:
        mine = _shard(goog, starts, lookbacks, SEEDED, "mine")
        pick = slice(0, 2)
    out = _run(runner, [(0, big), (joined_at, mine), (joined_at + 1, other)])
    np.testing.assert_array_equal(out["mine"].paths[pick], lone)


CASES = ["fits_context", "slides_window", "full_context", "batch_of_4"]


@pytest.mark.parametrize("steps", SHARING)
@pytest.mark.parametrize("case", CASES)
def test_greedy_forecasts_equal_the_reference_with_other_jobs_interleaved(parity, case, steps):
    c = parity.cases["cases"][case]
    starts = c.get("start_rows", [c.get("start_row")])
    predictor = KronosPredictor(parity.model, parity.tokenizer, device="cpu",
                                max_context=c["max_context"], clip=parity.cases["clip"])
    runner = StepRunner(predictor, "r", "cpu", max_skipped=1, max_step_rows=SHARING[steps])
    options = ForecastOptions(horizon=c["horizon"], **GREEDY)
    ref = _shard(parity.candles, starts, [c["lookback"]] * len(starts), options, "ref")
    big = _shard(
        parity.candles, range(0, 1500, 250), [100] * 6,
        ForecastOptions(horizon=12, sample_count=2, seed=3), "big",
    )
    # at full context every row's window slides from its first step: each step recomputes the
    # whole window (no cached rows), and such steps run alone
    out = _run(runner, [(0, big), (2, ref)], can_share=case != "full_context")
    expected = np.array(c["expected"]).reshape(len(starts), c["horizon"], 6)
    np.testing.assert_allclose(out["ref"].mean, expected, rtol=1e-4)
