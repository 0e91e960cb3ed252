"""Risk summary of one symbol's forecast, from its sample paths.

For each symbol, with ``R`` the simple return of the close from the last observed
candle to the last forecast step (one value per sample path):

* ``expected_return``: mean of R;
* ``p_up``: share of paths with R > 0; it moves in steps of 1 / ``sample_paths``, so 1.0
  from 20 paths means "all 20 paths ended up", not certainty;
* ``volatility``: per-bar forecast volatility, the standard deviation of the one-bar
  log returns of the close along the paths (the first bar from the last observed close);
* ``horizon_volatility``: standard deviation of log(1 + R);
* ``var_95``: 95% value-at-risk, -q where q is the 5% quantile of R. Sign: positive is a loss
  (0.03: the worst 5% of paths lose 3% or more); negative means even that quantile is a gain
  (-0.01: 95% of paths gain more than 1%), not a loss;
* ``es_95``: 95% expected shortfall, minus the mean of R over the paths at or below that
  quantile, with the same sign (positive: a loss);
* ``sample_paths``: the number of sample paths the figures come from (``p_up``'s resolution);
* ``realized_volatility``: standard deviation of the last ``realized_window`` one-bar
  log returns of the history (the same units as ``volatility``);
* ``vol_alert``: volatility > ``vol_factor`` x realized_volatility, an early warning
  that the model expects unusual moves.

These are per symbol only. The sample paths of different symbols are drawn
independently, so they carry no joint (cross-symbol) dependence: summing or
mixing them would give a portfolio VaR with zero correlation between assets,
which understates the risk of a real portfolio. No portfolio VaR is computed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa

VAR_LEVEL = 0.95
REALIZED_WINDOW = 20
VOL_FACTOR = 2.0


@dataclass(frozen=True)
class RiskSummary:
    """Risk figures of one symbol's forecast (see the module docstring for definitions)."""

    expected_return: float
    p_up: float
    volatility: float
    horizon_volatility: float
    var_95: float
    es_95: float
    realized_volatility: float
    vol_alert: bool
    sample_paths: int

    def to_dict(self) -> dict:
        return asdict(self)


# Arrow schema of a table of summaries (one row per symbol).
RISK_ARROW_SCHEMA = pa.schema([
    ("symbol", pa.string()),
    ("expected_return", pa.float64()),
    ("p_up", pa.float64()),
    ("volatility", pa.float64()),
    ("horizon_volatility", pa.float64()),
    ("var_95", pa.float64()),
    ("es_95", pa.float64()),
    ("realized_volatility", pa.float64()),
    ("vol_alert", pa.bool_()),
    ("sample_paths", pa.int32()),
])


def realized_volatility(history_close: np.ndarray, window: int = REALIZED_WINDOW) -> float:
    """Standard deviation of the last ``window`` one-bar log returns of a close history."""
    h = np.asarray(history_close, dtype=np.float64)[-window - 1:]
    if len(h) < 3 or (h <= 0).any():
        return float("nan")
    return float(np.diff(np.log(h)).std(ddof=1))


def risk_summary(
    paths_close: np.ndarray,
    last_close: float,
    history_close: np.ndarray | None = None,
    vol_factor: float = VOL_FACTOR,
    realized_window: int = REALIZED_WINDOW,
) -> RiskSummary:
    """Risk summary of one symbol from its close sample paths (S, H) and its last close.

    history_close: the closes the forecast saw (for the realised volatility and the
    alert); without it the alert is False and realized_volatility NaN.
    """
    p = np.asarray(paths_close, dtype=np.float64)  # (S, H)
    if p.ndim != 2 or p.shape[1] < 1:
        raise ValueError(f"paths_close must be (S, H), got {p.shape}")
    if last_close <= 0 or (p <= 0).any():
        raise ValueError("risk summaries need positive closes (log returns)")
    ret = p[:, -1] / last_close - 1.0  # (S,)
    # (S, H+1)
    logs = np.log(np.concatenate([np.full((p.shape[0], 1), float(last_close)), p], axis=1))
    steps = np.diff(logs, axis=1)  # (S, H)
    vol = float(steps.std(ddof=1)) if steps.size > 1 else 0.0
    q = float(np.quantile(ret, 1.0 - VAR_LEVEL))
    tail = ret[ret <= q]
    realized = (
        realized_volatility(history_close, realized_window)
        if history_close is not None
        else float("nan")
    )
    alert = bool(np.isfinite(realized) and vol > vol_factor * realized)
    return RiskSummary(
        expected_return=float(ret.mean()),
        p_up=float((ret > 0).mean()),
        volatility=vol,
        horizon_volatility=float(np.log1p(ret).std(ddof=1)) if ret.size > 1 else 0.0,
        var_95=-q,
        es_95=float(-tail.mean()),
        realized_volatility=realized,
        vol_alert=alert,
        sample_paths=int(p.shape[0]),
    )


def risk_table(symbols, summaries) -> pa.Table:
    """Summaries as an Arrow table in ``RISK_ARROW_SCHEMA``."""
    rows = [dict(symbol=s, **r.to_dict()) for s, r in zip(symbols, summaries)]
    return pa.Table.from_pylist(rows, schema=RISK_ARROW_SCHEMA)


def summarize(
    result, series, vol_factor: float = VOL_FACTOR, realized_window: int = REALIZED_WINDOW
) -> list[RiskSummary]:
    """One ``RiskSummary`` per series of a ``ForecastResult`` (paths (B, S, H, 6)) and the
    raw-scale input series (L_i, 6) it was forecast from."""
    from kronos_core.base.candles import FEATURES

    close = FEATURES.index("close")
    out = []
    for i, values in enumerate(series):
        hist = np.asarray(values, dtype=np.float64)[:, close]
        out.append(
            risk_summary(
                result.paths[i, :, :, close], float(hist[-1]), hist, vol_factor, realized_window
            )
        )
    return out
