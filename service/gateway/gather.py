"""Stage 3, gather: the shards' results back in request order (a failed
shard's or a non-finite forecast's symbols become errors), risk summaries from the paths,
and messages stripped of server paths before they reach a client."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kronos_core.base.errors import ErrorCode
from kronos_core.base.price_limits import PriceLimitRule
from service.common.messages import ShardResult
from service.common.schemas import FEATURE_NAMES
from service.gateway.prepare import Prepared, symbol_error


@dataclass
class Gathered:
    """The shards' results in request order, per answered series (the answer's columns, before
    the answer is built), and the errors so far."""

    symbols: list[str] = field(default_factory=list)
    timestamps: list[np.ndarray] = field(default_factory=list)  # (H,) datetime64[ns]
    mean: list[np.ndarray] = field(default_factory=list)  # (H, 6)
    quantiles: list[np.ndarray | None] = field(default_factory=list)  # (Q, H, 6)
    paths: list[np.ndarray | None] = field(default_factory=list)  # (S, H, 6)
    history_length: list[int] = field(default_factory=list)  # candles of history each series used
    last_timestamp: list[np.datetime64] = field(default_factory=list)  # its last input candle
    warnings: list[list[dict]] = field(default_factory=list)  # {code, message} per series
    histories: list[np.ndarray] = field(default_factory=list)  # (L, 6) input candles per series
    history_timestamps: list[np.ndarray] = field(default_factory=list)  # (L,) their times
    errors: list[dict] = field(default_factory=list)
    calibration_state: dict | None = None  # the adaptive calibration state the replicas applied
    price_limits: list[PriceLimitRule | None] = field(default_factory=list)  # rule per series


def gather(prep: Prepared, slices: list[slice], results: list[ShardResult]) -> Gathered:
    """The shards' results put back in request order; a failed shard's symbols become errors."""
    out = Gathered(errors=list(prep.errors))
    for sl, res in zip(slices, results, strict=True):
        if res.calibration_state is not None and out.calibration_state is None:
            # the first shard's: see docs/ledger.md, "In the service"
            out.calibration_state = res.calibration_state
        if res.error is not None:
            code = res.error_code or ErrorCode.FORECAST_FAILED
            out.errors.extend(symbol_error(s, code, res.error) for s in prep.symbols[sl])
            continue
        assert res.mean is not None  # a shard without an error carries its forecast
        for j in range(sl.stop - sl.start):
            i = sl.start + j
            q = None if res.quantiles is None else res.quantiles[:, j]  # (Q, H, 6)
            p = None if res.paths is None else res.paths[j]  # (S, H, 6)
            if not all(np.isfinite(a).all() for a in (res.mean[j], q, p) if a is not None):
                # JSON has no NaN: a non-finite forecast is this series' error, not a null in the
                # answer
                out.errors.append(
                    symbol_error(
                        prep.symbols[i],
                        ErrorCode.FORECAST_FAILED,
                        (
                            "the forecast holds NaN or infinite values; this series' candles "
                            "likely span too many orders of magnitude for the model (check its "
                            "values)"
                        ),
                    )
                )
                continue
            out.symbols.append(prep.symbols[i])
            out.timestamps.append(prep.y_ts[i])
            out.mean.append(res.mean[j])
            out.quantiles.append(q)
            out.paths.append(p)
            out.history_length.append(len(prep.values[i]))
            out.last_timestamp.append(prep.x_ts[i][-1])
            out.warnings.append(prep.warnings[i])
            out.histories.append(prep.values[i])
            out.history_timestamps.append(prep.x_ts[i])
            out.price_limits.append(prep.price_limits[i] if prep.price_limits else None)
    return out


def risk_summaries(
    paths: list[np.ndarray | None], histories: list[np.ndarray], vol_factor: float
) -> list[dict | None]:
    """Each forecast's risk summary from its close paths (None: no paths, or not computable)."""
    from kronos_core.eval.risk import risk_summary

    close = FEATURE_NAMES.index("close")
    out: list[dict | None] = []
    for p, history in zip(paths, histories, strict=True):
        hist = history[:, close].astype(np.float64)
        if p is None:  # no paths: no summary
            out.append(None)
            continue
        try:
            summary = risk_summary(p[:, :, close], float(hist[-1]), hist, vol_factor).to_dict()
            finite = all(math.isfinite(v) for v in summary.values() if isinstance(v, float))
            out.append(summary if finite else None)  # JSON has no NaN
        except (ValueError, TypeError, IndexError):  # non-positive prices or no paths: no summary
            out.append(None)
    return out


_ABS_PATH = re.compile(r"(?<![\w.:/])(?:/[^\s'\"/,;:()\[\]]+)+/?")


def public_message(message: str, store_root: Any = None) -> str:
    """Strip server file paths from a message sent to clients (paths stay in the logs).

    The store's folder becomes its name (``store sample-store-v1``), any other absolute path
    its last component (``/root/.cache/kronos/x/AAPL.arrow`` -> ``AAPL.arrow``).
    """
    if store_root is not None:
        root = str(store_root).rstrip("/")
        if root:
            message = message.replace(root + "/", "").replace(
                root, os.path.basename(root) or "store"
            )
    return _ABS_PATH.sub(lambda m: os.path.basename(m.group(0).rstrip("/")) or "/", message)
