"""Accuracy summaries of persisted scores: all time and over a rolling window.

The rolling window is the last ``window`` scored steps (default 500), taken in the order
of their truth's time (``step_time``, then the request's time): a count, not a time span,
so the rolling figures always rest on the same number of steps whatever the bar frequency,
and a quiet period does not empty them. ``window`` may also be a ``datetime.timedelta``
(steps whose truth is at most that long before the newest one's).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kronos_core.ledger.ledger import Ledger, filter_rows
from kronos_core.ledger.records import utc_ns

DEFAULT_WINDOW = 500  # scored steps in the rolling window
COVERED = "covered_"


def _mean(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None


def _values(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    return np.asarray(
        pc.fill_null(pc.cast(table[name], pa.float64()), np.nan).to_numpy(zero_copy_only=False),
        dtype=np.float64,
    )


def summarize(table: pa.Table) -> dict:
    """Scored count, coverage per level (and the steps it rests on), CRPS, MAE and direction
    accuracy of score rows (None where no row has the figure)."""
    coverage, coverage_count = {}, {}
    for name in sorted(c for c in table.column_names if c.startswith(COVERED)):
        v = _values(table, name)
        coverage[name[len(COVERED):]] = _mean(v)
        coverage_count[name[len(COVERED):]] = int(np.isfinite(v).sum())
    return {
        "scored": int(table.num_rows),
        "coverage": coverage,
        "coverage_count": coverage_count,
        "crps": _mean(_values(table, "crps")),
        "mae": _mean(_values(table, "abs_error")),
        "direction_accuracy": _mean(_values(table, "direction_hit")),
    }


def in_truth_order(table: pa.Table) -> pa.Table:
    """Score rows in the order their truths arrived: step time, then request time, id, symbol."""
    if table.num_rows == 0:
        return table
    return table.sort_by([("step_time", "ascending"), ("request_time", "ascending"),
                          ("request_id", "ascending"), ("symbol", "ascending")])


def rolling(table: pa.Table, window: int | timedelta = DEFAULT_WINDOW) -> pa.Table:
    """The rows of the rolling window (see the module's docstring)."""
    ordered = in_truth_order(table)
    if ordered.num_rows == 0:
        return ordered
    if isinstance(window, timedelta):
        t = pc.cast(ordered["step_time"], pa.int64()).to_numpy()
        keep = t >= t[-1] - int(window.total_seconds() * 1e9)
        return ordered.filter(pa.array(keep))
    if int(window) < 1:
        raise ValueError(f"window must be at least one step, got {window}")
    return ordered.slice(max(ordered.num_rows - int(window), 0))


def select(scores: pa.Table, model: str | None = None, symbol: str | None = None, since: Any = None,
           horizon_step: int | None = None) -> pa.Table:
    """Score rows of ``model`` (SHA-256, prefix or name), ``symbol``, forecasts requested at or
    after ``since``, and horizon step ``horizon_step`` (1 = the first forecast candle)."""
    out = filter_rows(
        scores, "request_time", None if since is None else utc_ns(since), model, symbol
    )
    if horizon_step is not None:
        out = out.filter(pc.equal(out["horizon_step"], int(horizon_step)))
    return out


def accuracy(scores: pa.Table | Ledger, model: str | None = None, symbol: str | None = None,
             since: Any = None, horizon_step: int | None = None,
             window: int | timedelta = DEFAULT_WINDOW) -> dict:
    """``{"window": ..., "rolling": summary, "all_time": summary}`` of the scores (a table,
    or a ledger whose persisted scores are read) selected by ``select``'s filters;
    ``summarize`` says what a summary holds."""
    table = scores.read_scores() if isinstance(scores, Ledger) else scores
    chosen = select(table, model, symbol, since, horizon_step)
    spec = ({"steps": int(window)} if not isinstance(window, timedelta)
            else {"seconds": window.total_seconds()})
    return {
        "window": spec, "rolling": summarize(rolling(chosen, window)),
        "all_time": summarize(chosen),
    }


def by_model_and_step(scores: pa.Table, window: int | timedelta = DEFAULT_WINDOW) -> list[dict]:
    """One row per model and horizon step: the model's SHA-256 and name, the step, and the
    all-time and rolling summaries (what ``kronos score`` prints)."""
    out: list[dict] = []
    if scores.num_rows == 0:
        return out
    models = sorted(set(scores["model_sha256"].to_pylist()))
    for sha in models:
        rows = scores.filter(pc.equal(scores["model_sha256"], sha))
        names = (
            [n for n in rows["model_name"].to_pylist() if n]
            if "model_name" in rows.column_names
            else []
        )
        for step in sorted(set(rows["horizon_step"].to_pylist())):
            part = rows.filter(pc.equal(rows["horizon_step"], step))
            out.append(
                {
                    "model_sha256": sha, "model_name": names[0] if names else None,
                    "horizon_step": int(step), "all_time": summarize(part),
                    "rolling": summarize(rolling(part, window)),
                }
            )
    return out
