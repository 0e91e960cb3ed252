"""``ForecastOptions``: every option of one forecast call, spelled once.

The service's request maps to it once (``service.common.schemas.ForecastRequest``), the CLI's flags
map to it once, and ``KronosPredictor.forecast(series, x_ts, y_ts, options)`` and the replica's
engine protocol take it whole. Frozen and hashable: shards whose options are equal share one
engine call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol


class QuantileCalibration(Protocol):
    """What the options need of a calibration (``kronos_core.calibration.conformal.Calibration``
    is one): the base layer names no calibration module, the calibration package imports this
    one."""

    def check_model(self, identity: Any) -> None:
        """Refuse (``CalibrationMismatch``) a predictor whose model this was not fitted for."""

    def apply(self, paths: Any, levels: Any, identity: Any = None) -> Any:
        """Corrected quantiles (Q, B, H, 6) of raw sample paths (B, S, H, 6)."""

    def correct_paths(self, paths: Any, identity: Any = None) -> Any:
        """The sample paths (B, S, H, 6) moved as the quantiles were."""

SLIDING_MODES = ("exact", "rolling", "recompute")  # how the engine treats a window that slides


def quantile_label(level: float) -> str:
    """A quantile level as text, exact and distinct: Python's shortest round-trip repr
    (0.1 -> "0.1", 0.1234567 -> "0.1234567"), so two different levels never share a label.
    Every name of a quantile (CLI columns, JSON keys, Arrow columns, metric keys) uses it."""
    return repr(float(level))


def quantile_column(feature: str, level: float) -> str:
    """The column of one feature's quantile: ``close_q0.1``."""
    return f"{feature}_q{quantile_label(level)}"


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        try:
            import numpy as np

            if isinstance(value, np.integer) and value >= 1:
                return int(value)
        except ImportError:  # pragma: no cover - numpy is a dependency
            pass
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class ForecastOptions:
    """How to forecast: horizon, sampling, quantiles, calibration, sliding mode.

    ``quantiles`` are levels in (0, 1), kept in the order given (answers list them so).
    ``repair`` and ``sliding`` left ``None`` take the predictor's own setting. ``calibration``
    corrects the quantiles (paths and mean stay raw); it must be fitted for the predictor's
    model (``CalibrationMismatch`` otherwise). Calibrations compare by identity, so options
    stay hashable.
    """

    horizon: int  # candles to forecast
    sample_count: int = 1  # sample paths per series
    temperature: float = 1.0  # softmax temperature (the reference's T)
    top_k: int = 0  # 0: off
    top_p: float = 0.9  # nucleus mass; 1.0: off
    seed: int | None = None  # None: unseeded; int: batch-invariant seeded sampling
    quantiles: tuple[float, ...] = ()  # levels in (0, 1)
    # candle repair (high/low consistent, volume/amount >= 0); None: predictor's
    repair: bool | None = None
    sliding: str | None = None  # "exact" | "rolling" | "recompute"; None: predictor's
    calibration: QuantileCalibration | None = None  # quantile correction fitted for this model

    def __post_init__(self) -> None:
        object.__setattr__(self, "horizon", _positive_int("horizon (pred_len)", self.horizon))
        object.__setattr__(self, "sample_count", _positive_int("sample_count", self.sample_count))
        levels = tuple(float(q) for q in self.quantiles)
        bad = [q for q in levels if not 0 < q < 1]
        if bad:
            raise ValueError(f"quantiles must be in (0, 1), got {bad}")
        object.__setattr__(self, "quantiles", levels)
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_k", int(self.top_k or 0))
        object.__setattr__(self, "top_p", float(self.top_p))
        if self.seed is not None:
            object.__setattr__(self, "seed", int(self.seed))
        if self.sliding is not None and self.sliding not in SLIDING_MODES:
            raise ValueError(f"sliding must be one of {SLIDING_MODES}, got {self.sliding!r}")

    def with_(self, **changes: Any) -> ForecastOptions:
        """A copy with ``changes`` (``dataclasses.replace``, validated again)."""
        return replace(self, **changes)
