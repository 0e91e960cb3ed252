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


POINT_FORECASTS = ("mean", "median")  # what a model's point forecast is, of its sample paths
REFERENCE_TEMPERATURE, REFERENCE_TOP_P = 1.0, 0.9  # the reference Kronos's predict() defaults


@dataclass(frozen=True)
class SamplingDefaults:
    """The sampling settings a model forecasts with where a request names none: the ``sampling``
    block of its ``kronos.json`` (chosen on validation windows by ``kronos tune-sampling``), else
    the reference's defaults (temperature 1, top-p 0.9, one path, the mean).

    ``sample_count`` is what the CLI, ``kronos eval`` and the service use when none is asked;
    ``point``: the point forecast scored and reported beside the quantiles, the mean or the
    median of the paths."""

    temperature: float = REFERENCE_TEMPERATURE
    top_p: float = REFERENCE_TOP_P
    sample_count: int = 1
    point: str = "mean"
    source: str = "reference defaults"  # where they came from: a kronos.json, the reference

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"sampling temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling top_p must be in (0, 1], got {self.top_p}")
        _positive_int("sampling sample_count", self.sample_count)
        if self.point not in POINT_FORECASTS:
            raise ValueError(f"sampling point must be one of {POINT_FORECASTS}, got {self.point!r}")

    @classmethod
    def from_manifest(cls, block: Any, source: str) -> SamplingDefaults:
        """From a ``kronos.json`` ``sampling`` block (None or missing keys: the reference's);
        a malformed block is a ``ValueError`` naming ``source``."""
        if block is None:
            return cls()
        if not isinstance(block, dict):
            raise ValueError(f"{source}: 'sampling' must be an object, got {type(block).__name__}")
        known = {"temperature", "top_p", "sample_count", "point"}
        try:
            return cls(**{k: block[k] for k in known if k in block}, source=source)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: sampling: {exc}") from exc

    def as_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p,
                "sample_count": self.sample_count, "point": self.point, "source": self.source}


@dataclass(frozen=True)
class ForecastOptions:
    """How to forecast: horizon, sampling, quantiles, calibration, sliding mode, move correction,
    price limits.

    ``quantiles`` are levels in (0, 1), kept in the order given (answers list them so).
    ``repair`` and ``sliding`` left ``None`` take the predictor's own setting. ``calibration``
    corrects the quantiles (paths and mean stay raw); it must be fitted for the predictor's
    model (``CalibrationMismatch`` otherwise). Calibrations compare by identity, so options
    stay hashable.
    """

    horizon: int  # candles to forecast
    sample_count: int = 1  # sample paths per series
    # softmax temperature (the reference's T); None: the model's (SamplingDefaults)
    temperature: float | None = None
    top_k: int = 0  # 0: off
    top_p: float | None = None  # nucleus mass; 1.0: off; None: the model's (SamplingDefaults)
    seed: int | None = None  # None: unseeded; int: batch-invariant seeded sampling
    quantiles: tuple[float, ...] = ()  # levels in (0, 1)
    # candle repair (high/low consistent, volume/amount >= 0); None: predictor's
    repair: bool | None = None
    sliding: str | None = None  # "exact" | "rolling" | "recompute"; None: predictor's
    calibration: QuantileCalibration | None = None  # quantile correction fitted for this model
    # hold the paths inside each series' daily price limits (the rules given per series:
    # kronos_core.base.price_limits); False: paths as sampled
    price_limits: bool = True
    # correct the paths' centre and spread with the model's fitted move correction (its
    # kronos.json "moves": kronos_core.base.moves), before the price limits; False: as sampled
    move_correction: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "horizon", _positive_int("horizon (pred_len)", self.horizon))
        object.__setattr__(self, "sample_count", _positive_int("sample_count", self.sample_count))
        levels = tuple(float(q) for q in self.quantiles)
        bad = [q for q in levels if not 0 < q < 1]
        if bad:
            raise ValueError(f"quantiles must be in (0, 1), got {bad}")
        object.__setattr__(self, "quantiles", levels)
        if self.temperature is not None:
            object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_k", int(self.top_k or 0))
        if self.top_p is not None:
            object.__setattr__(self, "top_p", float(self.top_p))
        if self.seed is not None:
            object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "price_limits", bool(self.price_limits))
        object.__setattr__(self, "move_correction", bool(self.move_correction))
        if self.sliding is not None and self.sliding not in SLIDING_MODES:
            raise ValueError(f"sliding must be one of {SLIDING_MODES}, got {self.sliding!r}")

    def with_(self, **changes: Any) -> ForecastOptions:
        """A copy with ``changes`` (``dataclasses.replace``, validated again)."""
        return replace(self, **changes)

    def with_defaults(self, defaults: SamplingDefaults) -> ForecastOptions:
        """The options with every sampling setting left None taken from ``defaults`` (the
        model's); itself when nothing is left None."""
        changes: dict[str, Any] = {}
        if self.temperature is None:
            changes["temperature"] = defaults.temperature
        if self.top_p is None:
            changes["top_p"] = defaults.top_p
        return replace(self, **changes) if changes else self
