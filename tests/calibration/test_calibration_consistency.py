"""A calibrated answer does not contradict itself: candle relations hold in every calibrated
quantile column, and summaries from the corrected paths agree with the corrected bands."""

from __future__ import annotations

import numpy as np
import pytest

from kronos_core.base.candles import FEATURES
from kronos_core.calibration.conformal import Calibration
from kronos_core.eval.risk import risk_summary

MODEL = {"name": "m", "sha256": "a" * 64}
OPEN, H, L, C = (FEATURES.index(f) for f in ("open", "high", "low", "close"))


class _Identity:
    sha256 = MODEL["sha256"]
    name = "m"


def _candles(rng, n, s, horizon, sd, drift=0.0):
    """Paths (n, s, H, 6) of consistent candles: high a little above, low a little below."""
    close = 100 * np.exp(drift + rng.normal(0, sd, size=(n, s, horizon)))
    out = np.empty((n, s, horizon, 6))
    out[..., OPEN] = close * np.exp(rng.normal(0, sd / 4, size=close.shape))
    out[..., C] = close
    out[..., H] = np.maximum(out[..., OPEN], close) * 1.001
    out[..., L] = np.minimum(out[..., OPEN], close) * 0.999
    out[..., 4:] = 1000.0
    return out


@pytest.fixture(scope="module")
def too_narrow():
    """A model whose close is far too sure (log sd 0.002) and whose high/low are not: the
    corrections differ a lot between features, which made high_q0.05 fall below close_q0.05."""
    rng = np.random.default_rng(0)
    paths = _candles(rng, 300, 32, 3, 0.002)
    truth = _candles(rng, 300, 1, 3, 0.03)[:, 0]
    # truths' highs and lows hug the close: tiny corrections there
    truth[..., H] = truth[..., C] * 1.0005
    truth[..., L] = truth[..., C] * 0.9995
    return Calibration.fit(paths, truth, (0.5, 0.8, 0.9), MODEL, "cqr"), rng


def test_candle_relations_hold_in_every_calibrated_quantile_column(too_narrow):
    cal, rng = too_narrow
    paths = _candles(rng, 8, 32, 3, 0.002)
    levels = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
    qs = cal.apply(paths, levels, _Identity())  # (Q, B, H, 6)
    for qi in range(len(levels)):
        q = qs[qi]
        assert (q[..., L] <= q[..., OPEN] + 1e-6).all() and (q[..., L] <= q[..., C] + 1e-6).all()
        assert (q[..., H] >= q[..., OPEN] - 1e-6).all() and (q[..., H] >= q[..., C] - 1e-6).all()
    assert (np.diff(qs, axis=0) >= -1e-4).all()  # and still no crossing between levels


@pytest.mark.parametrize("method", ["cqr", "cqr-r"])
def test_corrected_paths_agree_with_the_corrected_quantiles(method):
    rng = np.random.default_rng(1)
    paths = _candles(rng, 400, 64, 4, 0.003)
    truth = _candles(rng, 400, 1, 4, 0.03)[:, 0]
    cal = Calibration.fit(paths, truth, (0.5, 0.8, 0.9), MODEL, method)
    new = _candles(rng, 5, 400, 4, 0.003)
    fixed = cal.correct_paths(new, _Identity())
    assert fixed.shape == new.shape
    for lv in (0.05, 0.1, 0.25, 0.75, 0.9, 0.95):
        want = cal.quantiles(new[..., C], [lv])[0]  # (B, H)
        got = np.quantile(fixed[..., C], lv, axis=1)
        np.testing.assert_allclose(got, want, rtol=3e-3)
    np.testing.assert_allclose(
        np.median(fixed[..., C], axis=1), np.median(new[..., C], axis=1), rtol=1e-6
    )
    np.testing.assert_array_equal(fixed[..., 4:], new[..., 4:])  # volume, amount untouched
    rank_before = np.argsort(np.argsort(new[..., C], axis=1), axis=1)
    rank_after = np.argsort(np.argsort(fixed[..., C], axis=1), axis=1)
    # a monotone map: each path keeps its rank
    np.testing.assert_array_equal(rank_before, rank_after)
    assert (fixed[..., H] >= fixed[..., C]).all() and (fixed[..., L] <= fixed[..., C]).all()


def test_risk_summary_from_corrected_paths_agrees_with_the_calibrated_close(too_narrow):
    """The reported case: the calibrated close_q0.05 is below the last close, so var_95 must be
    a loss (and P(up) not near 1), which the raw paths (all a gain) contradicted."""
    cal, rng = too_narrow
    paths = _candles(rng, 1, 400, 3, 0.002, drift=0.01)  # raw: every path ends ~1% up
    last_close = 100.0
    q05 = cal.apply(paths, (0.05,), _Identity())[0, 0, -1, C]
    assert q05 < 0.99 * last_close  # the calibrated band: >1% below the last close
    raw = risk_summary(paths[0, :, :, C], last_close)
    assert raw.var_95 < 0 and raw.p_up > 0.9  # the contradiction of the raw paths
    fixed = risk_summary(cal.correct_paths(paths, _Identity())[0, :, :, C], last_close)
    assert fixed.var_95 == pytest.approx(1 - q05 / last_close, rel=0.02)
    assert fixed.var_95 > 0 and fixed.p_up < 0.9
