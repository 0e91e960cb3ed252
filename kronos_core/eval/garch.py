"""The GARCH(1,1) baseline with Student-t innovations, per series (package ``arch``).

Per series, fitted ONCE on the close's log returns in percent (``100 * diff(log close)``) of the
history before the series' first scored row (a corpus series: before its ``eval_from``; files:
before the first window's origin), at most the last ``MAX_FIT_RETURNS`` of them:

    r_t = mu + e_t,   e_t = sigma_t z_t,   sigma_t^2 = omega + alpha e_{t-1}^2 + beta sigma_{t-1}^2,
    z_t ~ Student-t(nu), scaled to unit variance.

The fitted parameters then stay fixed: the variance recursion runs on through the series (with the
realised returns, each one known before the next bar), so a window's forecast starts from the
conditional variance at its origin, which uses rows before the origin only. The h-step distribution
of the close is simulated (``GARCH_SAMPLES`` paths, the variance recursion driven by the simulated
shocks, seeded per series), as price paths ``last * exp(cumsum(r) / 100)`` that score like the
model's. Its point forecast is the paths' median.

A series whose fit fails, or with fewer than ``MIN_FIT_RETURNS`` returns before its first scored
row, gets a constant-volatility Student-t (nu = 5) with the sample mean and variance of the returns
it has; the report lists those series under ``garch.fallback``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

GARCH_SAMPLES = 200
MAX_FIT_RETURNS = 5000
MIN_FIT_RETURNS = 100
FALLBACK_NU = 5.0
INSTALL_HINT = ("the GARCH(1,1) baseline needs the package arch: "
                "pip install 'kronos-portfolio[eval]'")


def require_arch() -> None:
    """Raise ``ImportError`` naming what to install when ``arch`` is missing."""
    try:
        import arch  # noqa: F401
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc


@dataclass
class GarchFit:
    """Fixed parameters of one series' model (returns in percent)."""

    mu: float
    omega: float
    alpha: float
    beta: float
    nu: float
    returns: int  # how many returns it was fitted on
    fallback: str | None = None  # why a constant-volatility model stands in, else None

    def as_dict(self) -> dict:
        return {"mu": self.mu, "omega": self.omega, "alpha": self.alpha, "beta": self.beta,
                "nu": self.nu, "returns": self.returns, "fallback": self.fallback}


def pct_returns(close: np.ndarray) -> np.ndarray:
    """(T - 1,) log returns in percent of a positive close series (T,)."""
    c = np.asarray(close, dtype=np.float64)
    if (c <= 0).any():
        raise ValueError("GARCH needs positive closes")
    return 100.0 * np.diff(np.log(c))


def _constant(r: np.ndarray, why: str) -> GarchFit:
    var = float(r.var(ddof=1)) if len(r) > 1 else 1.0
    return GarchFit(float(r.mean()) if len(r) else 0.0, max(var, 1e-12), 0.0, 0.0, FALLBACK_NU,
                    len(r), why)


def fit_garch(returns: np.ndarray) -> GarchFit:
    """GARCH(1,1)-t by maximum likelihood (``arch``), or the constant fallback (module
    docstring)."""
    from arch import arch_model

    r = np.asarray(returns, dtype=np.float64)[-MAX_FIT_RETURNS:]
    if len(r) < MIN_FIT_RETURNS:
        return _constant(r, f"{len(r)} returns before the first scored row (< {MIN_FIT_RETURNS})")
    if r.std() == 0:
        return _constant(r, "constant price before the first scored row")
    # the optimiser wants returns of order 1: fit on r * scale (a power of 10), then scale back
    scale = 10.0 ** -np.floor(np.log10(r.std()))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence warnings: judged by the flag below
            model = arch_model(r * scale, mean="Constant", vol="GARCH", p=1, q=1, dist="t",
                               rescale=False)
            res = model.fit(disp="off", show_warning=False)
        p = res.params
        fit = GarchFit(float(p["mu"]) / scale, float(p["omega"]) / scale ** 2, float(p["alpha[1]"]),
                       float(p["beta[1]"]), float(p["nu"]), len(r))
    except Exception as exc:  # arch raises several types on degenerate data
        return _constant(r, f"fit failed: {type(exc).__name__}: {exc}")
    values = np.array([fit.mu, fit.omega, fit.alpha, fit.beta, fit.nu])
    if not np.isfinite(values).all() or fit.nu <= 2 or fit.omega <= 0:
        return _constant(r, f"fit gave unusable parameters {values.round(4).tolist()}")
    if res.convergence_flag != 0:
        log.info("GARCH fit did not report convergence (flag %s); its parameters are used",
                 res.convergence_flag)
    return fit


def conditional_variance(fit: GarchFit, returns: np.ndarray, start: int) -> np.ndarray:
    """(T - 1,) the one-step variance of each return given the returns before it, by the fixed
    recursion started at return ``start`` (earlier entries: NaN) from the fit's unconditional
    variance (or the sample variance when the model is not stationary)."""
    from scipy.signal import lfilter

    r = np.asarray(returns, dtype=np.float64)
    out = np.full(len(r), np.nan)
    if start >= len(r):
        return out
    persistence = fit.alpha + fit.beta
    var0 = fit.omega / (1 - persistence) if persistence < 0.999 else float(np.var(r[start:]))
    e2 = (r[start:] - fit.mu) ** 2  # (n,)
    # sigma2[k] = omega + alpha e2[k-1] + beta sigma2[k-1], sigma2[0] = var0
    drive = fit.omega + fit.alpha * e2[:-1]  # (n - 1,)
    tail, _ = lfilter([1.0], [1.0, -fit.beta], drive, zi=[fit.beta * var0])
    out[start] = var0
    out[start + 1:] = tail
    return out


def simulate(fit: GarchFit, var_next: np.ndarray, last: np.ndarray, horizon: int,
             samples: int, rng: np.random.Generator) -> np.ndarray:
    """(N, S, H) close paths from each window's next-return variance (N,) and last close (N,)."""
    n = len(var_next)
    nu = fit.nu
    z = rng.standard_t(nu, size=(n, samples, horizon)) / np.sqrt(nu / (nu - 2))  # unit variance
    var = np.repeat(np.asarray(var_next, dtype=np.float64)[:, None], samples, axis=1)  # (N, S)
    cum = np.zeros((n, samples))
    out = np.empty((n, samples, horizon))
    for k in range(horizon):
        shock = np.sqrt(var) * z[:, :, k]  # (N, S)
        cum += fit.mu + shock
        out[:, :, k] = cum
        var = fit.omega + fit.alpha * shock ** 2 + fit.beta * var
    return np.asarray(last, dtype=np.float64)[:, None, None] * np.exp(out / 100.0)


def garch_samples(closes: Sequence[np.ndarray], fit_ends: Sequence[int], series_index: np.ndarray,
                  origins: np.ndarray, horizon: int, samples: int = GARCH_SAMPLES,
                  seed: int = 0, progress: bool = True) -> tuple[np.ndarray, dict[int, GarchFit]]:
    """GARCH-t samples (N, S, H) of the close for windows (``series_index``, ``origins``: first
    truth row) over series with these ``closes``; series k is fitted on rows before
    ``fit_ends[k]`` (which must be <= each of its window origins). Returns the samples and the
    fit of each series used."""
    from tqdm.auto import tqdm

    require_arch()
    out = np.empty((len(origins), samples, horizon))
    fits: dict[int, GarchFit] = {}
    for k in tqdm(np.unique(series_index), desc="GARCH fits", unit="series", disable=not progress):
        k = int(k)
        mine = np.flatnonzero(series_index == k)
        rows = np.asarray(origins)[mine]
        end = int(fit_ends[k])
        if rows.min() < end:
            raise ValueError(f"series {k}: a window's origin {rows.min()} lies before the "
                             f"GARCH fit's end {end}")
        r = pct_returns(closes[k])
        # returns before row `end` are r[:end - 1] (r[j] moves row j to j + 1)
        fit = fit_garch(r[:max(end - 1, 0)])
        fits[k] = fit
        start = max(end - 1 - MAX_FIT_RETURNS, 0)
        var = conditional_variance(fit, r, start)
        # a window with origin o forecasts the return r[o - 1] first: its variance var[o - 1]
        var_next = var[rows - 1]
        last = np.asarray(closes[k], dtype=np.float64)[rows - 1]
        rng = np.random.default_rng([seed, k])
        out[mine] = simulate(fit, var_next, last, horizon, samples, rng)
    return out, fits
