"""The GARCH(1,1)-t baseline (package arch) and the Diebold–Mariano paired test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kronos_core.eval import garch, paired


def _garch_series(n: int, seed: int = 0, omega=0.05, alpha=0.1, beta=0.85, nu=6.0, mu=0.02):
    """Closes (n + 1,) from a GARCH(1,1)-t in percent returns, and the true variances (n,)."""
    rng = np.random.default_rng(seed)
    var = omega / (1 - alpha - beta)
    r, v = np.empty(n), np.empty(n)
    for t in range(n):
        v[t] = var
        r[t] = mu + np.sqrt(var) * rng.standard_t(nu) / np.sqrt(nu / (nu - 2))
        var = omega + alpha * (r[t] - mu) ** 2 + beta * var
    return 100.0 * np.exp(np.concatenate([[0.0], np.cumsum(r) / 100.0])), v


def test_fit_recovers_the_parameters_of_a_garch_t_series():
    close, _ = _garch_series(4000)
    fit = garch.fit_garch(garch.pct_returns(close))
    assert fit.fallback is None and fit.returns == 4000
    assert fit.alpha == pytest.approx(0.1, abs=0.04) and fit.beta == pytest.approx(0.85, abs=0.06)
    assert 3.5 < fit.nu < 12


def test_fit_is_the_same_in_any_price_unit_and_scale():
    close, _ = _garch_series(2000, seed=3)
    small = garch.fit_garch(garch.pct_returns(close) / 1000)  # e.g. 1-minute FX moves
    big = garch.fit_garch(garch.pct_returns(close))
    assert small.alpha == pytest.approx(big.alpha, rel=0.05)
    assert small.omega == pytest.approx(big.omega / 1e6, rel=0.1)
    assert small.mu == pytest.approx(big.mu / 1000, rel=0.1)


def test_conditional_variance_is_the_recursion():
    close, _ = _garch_series(300, seed=1)
    r = garch.pct_returns(close)
    fit = garch.GarchFit(0.01, 0.05, 0.1, 0.85, 6.0, 300)
    var = garch.conditional_variance(fit, r, 10)
    assert np.isnan(var[:10]).all()
    expect = fit.omega / (1 - fit.alpha - fit.beta)
    for t in range(10, len(r)):
        assert var[t] == pytest.approx(expect)
        expect = fit.omega + fit.alpha * (r[t] - fit.mu) ** 2 + fit.beta * expect


def test_one_step_samples_have_the_conditional_variance():
    fit = garch.GarchFit(0.0, 0.05, 0.1, 0.85, 6.0, 300)
    paths = garch.simulate(fit, np.array([0.5, 2.0]), np.array([10.0, 20.0]), 3, 40000,
                           np.random.default_rng(0))  # (2, S, 3)
    step1 = 100 * np.log(paths[:, :, 0] / np.array([10.0, 20.0])[:, None])
    assert step1.var(axis=1) == pytest.approx([0.5, 2.0], rel=0.05)
    # step 3's variance follows the expected recursion: v2 = omega + (alpha + beta) v1, ...
    v = np.array([0.5, 2.0])
    v2 = fit.omega + (fit.alpha + fit.beta) * v
    v3 = fit.omega + (fit.alpha + fit.beta) * v2
    total = 100 * np.log(paths[:, :, 2] / np.array([10.0, 20.0])[:, None])
    assert total.var(axis=1) == pytest.approx(v + v2 + v3, rel=0.06)


def test_samples_use_rows_before_each_origin_only():
    close, _ = _garch_series(600, seed=2)
    origins = np.array([450, 500, 550])
    base, fits = garch.garch_samples([close], [400], np.zeros(3, int), origins, 4, 50)
    changed = close.copy()
    changed[501:] *= np.linspace(1, 3, len(changed) - 501)  # rows from 501 on: other prices
    again, _ = garch.garch_samples([changed], [400], np.zeros(3, int), origins, 4, 50)
    np.testing.assert_array_equal(base[:2], again[:2])  # origins 450 and 500 see rows < 500 only
    assert not np.allclose(base[2], again[2])
    assert fits[0].returns == 399 and base.shape == (3, 50, 4)
    with pytest.raises(ValueError, match="before the GARCH fit's end"):
        garch.garch_samples([close], [460], np.zeros(3, int), origins, 4, 50)


def test_a_window_reads_no_row_at_or_past_its_origin():
    """Each window's forecast depends on the rows before its origin (its first truth row) only:
    changing the origin row itself leaves it unchanged, changing the last row before it does
    not; likewise the fit reads rows before its end only. Planted faults it catches, in
    ``garch_samples``: ``var[rows - 1]`` -> ``var[rows]`` or ``closes[k]...[rows - 1]`` ->
    ``[rows]`` (one row past the origin), ``r[:max(end - 1, 0)]`` -> ``r[:max(end, 0)]``."""
    close, _ = _garch_series(600, seed=7)
    origins = np.array([450, 520])
    fit_end = 400

    def run(c):
        return garch.garch_samples([c], [fit_end], np.zeros(2, int), origins, 3, 40,
                                   progress=False)

    base, fits = run(close)
    for i, o in enumerate(origins):
        at_origin = close.copy()
        at_origin[o] *= 1.25  # the first truth row: not known at the origin
        again, _ = run(at_origin)
        np.testing.assert_array_equal(again[i], base[i])
        before = close.copy()
        before[o - 1] *= 1.25  # the last context row: known, and it moves the forecast
        moved, _ = run(before)
        assert not np.allclose(moved[i], base[i])
    at_end = close.copy()
    at_end[fit_end] *= 1.25  # the first row after the fit's history
    _, refit = run(at_end)
    assert refit[0].as_dict() == fits[0].as_dict()
    before_end = close.copy()
    before_end[fit_end - 1] *= 1.25
    _, moved_fit = run(before_end)
    assert moved_fit[0].as_dict() != fits[0].as_dict()


def test_short_or_flat_history_falls_back_to_a_constant_volatility():
    close, _ = _garch_series(60, seed=4)
    fit = garch.fit_garch(garch.pct_returns(close))
    assert fit.fallback and "< 100" in fit.fallback and fit.alpha == fit.beta == 0
    flat = garch.fit_garch(np.zeros(300))
    assert flat.fallback and "constant" in flat.fallback


# ---- Diebold–Mariano -------------------------------------------------------------------------
def test_hac_variance_by_hand():
    d = np.array([1.0, -1.0, 2.0, 0.0, 1.0])
    x = d - d.mean()
    g0, g1 = (x @ x) / 5, (x[1:] @ x[:-1]) / 5
    assert paired.hac_variance(d, 0) == pytest.approx(g0)
    assert paired.hac_variance(d, 1) == pytest.approx(g0 + 2 * 0.5 * g1)


def test_dm_finds_a_better_forecaster_and_not_an_equal_one():
    rng = np.random.default_rng(0)
    base = rng.gamma(2.0, 1.0, 400)
    worse = base + 0.3 + rng.normal(0, 0.5, 400)
    res = paired.diebold_mariano(base, worse, horizon=1)
    assert res["mean_difference"] == pytest.approx((base - worse).mean())
    assert res["statistic"] < 0 and res["p_value"] < 1e-6
    same = paired.diebold_mariano(base, base + rng.normal(0, 0.5, 400))
    assert same["p_value"] > 0.01
    assert paired.diebold_mariano(base, base)["p_value"] == 1.0
    assert paired.diebold_mariano(base[:2], worse[:2])["p_value"] is None  # too few windows


def test_dm_p_value_matches_a_t_test_without_autocorrelation():
    """With no lags and horizon 1, DM is the paired t statistic (variance with 1/n) times the
    HLN factor sqrt((n - 1) / n), i.e. exactly the usual paired t test."""
    from scipy.stats import ttest_rel

    rng = np.random.default_rng(5)
    a, b = rng.normal(0, 1, 50), rng.normal(0.3, 1, 50)
    res = paired.diebold_mariano(a, b, horizon=1, lags=0)
    ref = ttest_rel(a, b)
    assert res["statistic"] == pytest.approx(ref.statistic)
    assert res["p_value"] == pytest.approx(ref.pvalue)
    assert paired.diebold_mariano(a, b)["lags"] == 3  # floor(4 (50 / 100)^(2/9))


def _ar1(n: int, phi: float, seed: int) -> np.ndarray:
    """(n,) an AR(1) x_t = phi x_{t-1} + e_t, e ~ N(0, 1), started at 0."""
    e = np.random.default_rng(seed).normal(size=n)
    x = np.zeros(n)
    for t in range(n):
        x[t] = (phi * x[t - 1] if t else 0.0) + e[t]
    return x


def _dm_by_definition(d: list[float], lags: int, h: int) -> float:
    """The HLN-corrected DM statistic written out from its definition with plain sums:
    gamma_k = (1/n) sum_{t=k}^{n-1} (d_t - mean)(d_{t-k} - mean),
    V = gamma_0 + 2 sum_{k=1}^{K} (1 - k / (K + 1)) gamma_k,
    DM = mean / sqrt(V / n) * sqrt((n + 1 - 2h + h (h - 1) / n) / n)."""
    n = len(d)
    mean = sum(d) / n

    def gamma(k: int) -> float:
        return sum((d[t] - mean) * (d[t - k] - mean) for t in range(k, n)) / n

    v = gamma(0) + 2 * sum((1 - k / (lags + 1)) * gamma(k) for k in range(1, lags + 1))
    return mean / math.sqrt(v / n) * math.sqrt((n + 1 - 2 * h + h * (h - 1) / n) / n)


@pytest.mark.parametrize("horizon", [1, 5])
def test_dm_uses_the_hac_variance_on_autocorrelated_differences(horizon):
    """Loss differences that follow an AR(1) (phi 0.7, as overlapping windows of one series
    give): the statistic equals the one written out from the definition with the default lags,
    and the HAC variance makes it clearly smaller than a plain-variance one. Planted fault it
    catches: ``hac_variance(d, lags)`` -> ``hac_variance(d, 0)`` in ``diebold_mariano``."""
    from scipy.stats import t as student_t

    n = 200
    d = 0.25 + _ar1(n, 0.7, seed=11)  # loss of A minus loss of B: A about 0.25 worse
    loss_b = np.random.default_rng(12).gamma(2.0, 1.0, n)
    loss_a = loss_b + d
    lags = max(horizon - 1, math.floor(4 * (n / 100) ** (2 / 9)))  # 4 at n = 200
    assert lags == 4
    expected = _dm_by_definition(d.tolist(), lags, horizon)
    res = paired.diebold_mariano(loss_a, loss_b, horizon=horizon)
    assert res["lags"] == lags
    assert res["statistic"] == pytest.approx(expected, rel=1e-9)
    assert res["p_value"] == pytest.approx(2 * student_t.sf(abs(expected), n - 1), rel=1e-9)
    # positive autocorrelation: the long-run variance is well above gamma_0 alone
    no_hac = _dm_by_definition(d.tolist(), 0, horizon)
    assert abs(res["statistic"]) < 0.7 * abs(no_hac)


def test_window_losses_are_scaled_by_the_mase_scale():
    history = np.array([[1.0, 2.0, 3.0], [10.0, 30.0, 50.0]])  # scales 1 and 20
    truth = np.array([[4.0], [70.0]])
    point = np.array([[3.0], [50.0]])
    losses = paired.window_losses(point[:, None, :], point, truth, history)
    np.testing.assert_allclose(losses["abs_error"], [1.0, 1.0])
    np.testing.assert_allclose(losses["crps"], [1.0, 1.0])  # one sample: CRPS = |error|
