"""What one answered forecast puts in the ledger: ``ForecastRecord`` and ``CalibrationStamp``,
and how records become the ledger's long table (one row per symbol x horizon step).

Column names are in ``docs/ledger.md``; quantile columns are named with
``kronos_core.base.options.quantile_column`` (``close_q0.1``), so a level is spelled the same
everywhere. Timestamps (``origin``, ``step_time``) are the store's naive wall clock: the
scorer looks the truth up in the store at exactly ``step_time``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from kronos_core.base.candles import FEATURES
from kronos_core.base.options import quantile_column

DEFAULT_FEATURES = ("close",)  # the features whose mean and quantiles a ledger keeps


def wall_clock_ns(value: Any) -> int:
    """A time as int64 ns of its naive wall clock (a tz-aware time keeps its local wall time)."""
    ts = pd.Timestamp(value)
    if ts is pd.NaT:
        raise ValueError(f"{value!r} is not a time")
    if ts.tzinfo is not None:
        ts = ts.tz_localize(None)
    return int(ts.as_unit("ns").value)


def wall_clock_ns_array(values: Any) -> np.ndarray:
    """Times as int64 ns of their naive wall clock (n,); a ``datetime64`` array converts
    without a per-item step (the fast way to pass ``ForecastRecord.timestamps``)."""
    arr = np.asarray(values)
    if arr.dtype.kind == "M":
        return arr.astype("datetime64[ns]").astype("i8")
    if not len(arr):
        return np.zeros(0, dtype="i8")
    naive = arr.dtype.kind == "U" and not (
        np.char.endswith(arr, "Z").any()
        or (np.char.rfind(arr, "+") > 9).any()
        or (np.char.count(arr, "-") > 2).any()
    )
    if naive:  # ISO 8601 text without an offset (the service's answers): numpy parses it at once
        try:
            return arr.astype("datetime64[ns]").astype("i8")
        except ValueError:  # other spellings, or an offset: pandas below
            pass
    idx = pd.DatetimeIndex(list(values))
    if idx.tz is not None:
        idx = idx.tz_localize(None)
    return np.asarray(idx.as_unit("ns").asi8, dtype="i8")


def utc_ns(value: Any) -> int:
    """A time as int64 ns UTC (a naive time is taken as UTC)."""
    ts = pd.Timestamp(value)
    if ts is pd.NaT:
        raise ValueError(f"{value!r} is not a time")
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    return int(ts.as_unit("ns").value)


def series_hash(timestamps: Any, values: Any) -> str:
    """SHA-256 of an inline series' candles: its timestamps (int64 ns wall clock) then its
    values (L, 6) as float64, so the same candles always give the same hash."""
    ts = np.asarray(
        pd.DatetimeIndex(pd.to_datetime(np.asarray(timestamps)))
        .tz_localize(None)
        .as_unit("ns")
        .asi8, dtype="<i8",
    )  # (L,)
    vals = np.ascontiguousarray(np.asarray(values, dtype="<f8"))  # (L, 6)
    h = hashlib.sha256()
    h.update(ts.tobytes())
    h.update(vals.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class CalibrationStamp:
    """The calibration state a forecast was corrected with: method (cqr, cqr-r, aci), the
    state's version (0: as fitted in the file; each online update adds 1), a hash of its
    corrections, and the time of its last update (UTC, None: never updated online)."""

    method: str
    version: int = 0
    hash: str = ""
    updated_at: datetime | None = None

    def as_dict(self) -> dict:
        return {"method": self.method, "version": self.version, "hash": self.hash,
                "updated_at": None if self.updated_at is None else self.updated_at.isoformat()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CalibrationStamp:
        """From ``as_dict``'s shape (other keys are ignored; ``updated_at`` text or datetime)."""
        upd = d.get("updated_at")
        if upd is not None and not isinstance(upd, datetime):
            upd = pd.Timestamp(upd).to_pydatetime()
        return cls(
            str(d.get("method") or ""), int(d.get("version") or 0), str(d.get("hash") or ""), upd
        )


@dataclass
class ForecastRecord:
    """One symbol's forecast of one request, as the ledger keeps it.

    ``timestamps`` (H,) the steps' times; ``mean`` feature -> (H,) values, or an array
    (H, 6) in ``FEATURES`` order; ``quantiles`` level (float or its label) -> the same (the
    answer's, i.e. calibrated when ``calibration`` is set), or an array (Q, H, 6) with its
    ``levels`` (Q,). Features the ledger does not keep are ignored. ``calibration``: a
    ``CalibrationStamp`` or its dict (``CalibrationStamp.from_dict``).
    ``last_close``: the close at ``origin`` (for the direction score; None: the scorer reads
    it from the store). ``series_hash``: for an inline series (``source="inline"``), the hash
    of its candles (``series_hash``). ``paths`` (S, H) close sample paths, kept only by a
    ledger made with ``keep_paths=True``.
    """

    request_id: str
    symbol: str
    origin: Any  # last input candle's time (wall clock)
    timestamps: Any  # (H,) datetime64 array (fastest), or times pandas reads
    mean: Any  # feature -> (H,) floats, or (H, 6)
    quantiles: Any  # level -> feature -> (H,) floats (or -> (H, 6)), or (Q, H, 6) with ``levels``
    model_sha256: str
    model_name: str | None = None
    request_time: Any = None  # UTC; None: now
    calibration: CalibrationStamp | Mapping[str, Any] | None = None
    last_close: float | None = None
    frequency: str | None = None  # the store's frequency folder, when known
    source: str = "store"  # "store" | "inline"
    series_hash: str | None = None
    paths: Any = None  # (S, H) close paths, or (S, H, 6), or None
    levels: Sequence[float] | None = None  # the levels of an array ``quantiles`` (Q,)

    def __post_init__(self) -> None:
        if isinstance(self.calibration, Mapping):
            self.calibration = CalibrationStamp.from_dict(self.calibration)
        if not isinstance(self.quantiles, Mapping):
            arr = np.asarray(self.quantiles)
            if arr.size == 0:
                self.quantiles = {}
            else:
                if self.levels is None or len(self.levels) != arr.shape[0]:
                    raise ValueError(
                        f"{self.symbol}: quantiles as an array (Q, H, 6) need their levels (Q,)"
                    )
                self.quantiles = {float(q): arr[i] for i, q in enumerate(self.levels)}


def _levels(records: Sequence[ForecastRecord]) -> list[float]:
    return sorted({float(q) for r in records for q in r.quantiles})


def to_table(records: Sequence[ForecastRecord], features: Sequence[str] = DEFAULT_FEATURES,
             keep_paths: bool = False, now_ns: int | None = None) -> pa.Table:
    """The long table of ``records``: one row per record x step (see ``docs/ledger.md``)."""
    now_ns = utc_ns(datetime.now(timezone.utc)) if now_ns is None else now_ns
    levels = _levels(records)
    sizes = [len(r.timestamps) for r in records]
    n = int(sum(sizes))

    def per_record(values: list) -> np.ndarray:
        return (
            np.repeat(np.asarray(values, dtype=object), sizes)
            if n
            else np.asarray([], dtype=object)
        )

    cols: dict[str, pa.Array] = {}
    cols["request_id"] = pa.array(per_record([r.request_id for r in records]), pa.string())
    req_t = [utc_ns(r.request_time) if r.request_time is not None else now_ns for r in records]
    cols["request_time"] = pa.array(
        np.repeat(np.asarray(req_t, dtype="i8"), sizes).astype("datetime64[ns]"),
        pa.timestamp("ns", tz="UTC"),
    )
    cols["model_sha256"] = pa.array(per_record([r.model_sha256 for r in records]), pa.string())
    cols["model_name"] = pa.array(per_record([r.model_name for r in records]), pa.string())
    stamps = [_stamp(r.calibration) for r in records]
    cols["calibration_method"] = pa.array(
        per_record([s.method if s else None for s in stamps]), pa.string()
    )
    cols["calibration_version"] = pa.array(
        per_record([s.version if s else None for s in stamps]), pa.int64()
    )
    cols["calibration_hash"] = pa.array(
        per_record([s.hash if s else None for s in stamps]), pa.string()
    )
    upd = [None if s is None or s.updated_at is None else utc_ns(s.updated_at) for s in stamps]
    cols["calibration_updated_at"] = pa.array(per_record(upd), pa.timestamp("ns", tz="UTC"))
    cols["symbol"] = pa.array(per_record([r.symbol for r in records]), pa.string())
    cols["frequency"] = pa.array(per_record([r.frequency for r in records]), pa.string())
    cols["source"] = pa.array(per_record([r.source for r in records]), pa.string())
    cols["series_hash"] = pa.array(per_record([r.series_hash for r in records]), pa.string())
    origins = np.repeat(np.asarray([wall_clock_ns(r.origin) for r in records], dtype="i8"), sizes)
    cols["origin"] = pa.array(origins.astype("datetime64[ns]"), pa.timestamp("ns"))
    cols["last_close"] = pa.array(per_record([r.last_close for r in records]), pa.float64())
    cols["horizon"] = pa.array(np.repeat(np.asarray(sizes, dtype="i8"), sizes), pa.int32())
    steps = np.concatenate([np.arange(1, s + 1) for s in sizes]) if n else np.zeros(0, dtype="i8")
    cols["horizon_step"] = pa.array(steps.astype("i4"), pa.int32())
    step_ns = (
        np.concatenate([wall_clock_ns_array(r.timestamps) for r in records])
        if n
        else np.zeros(0, "i8")
    )
    if n and (step_ns <= origins).any():
        bad = next(
            r
            for r in records
            if any(wall_clock_ns(t) <= wall_clock_ns(r.origin) for t in r.timestamps)
        )
        raise ValueError(f"{bad.symbol}: a step's time is not after the origin {bad.origin}")
    cols["step_time"] = pa.array(step_ns.astype("datetime64[ns]"), pa.timestamp("ns"))
    for f in features:
        cols[f"mean_{f}"] = pa.array(
            _stack([_feature(r.mean, f) for r in records], sizes), pa.float64(), from_pandas=True
        )
    for q in levels:
        for f in features:
            vals = [_level(r.quantiles, q, f) for r in records]
            cols[quantile_column(f, q)] = pa.array(
                _stack(vals, sizes), pa.float64(), from_pandas=True
            )
    if keep_paths:
        rows: list[list[float] | None] = []
        for r, s in zip(records, sizes):
            if r.paths is None:
                rows.extend([None] * s)
            else:
                p = np.asarray(r.paths, dtype=np.float64)  # (S, H) or (S, H, 6)
                if p.ndim == 3:
                    p = p[..., FEATURES.index("close")]
                rows.extend(p[:, h].tolist() for h in range(s))
        cols["paths_close"] = pa.array(rows, pa.list_(pa.float64()))
    return pa.table(cols)


def _stamp(value: CalibrationStamp | Mapping[str, Any] | None) -> CalibrationStamp | None:
    return CalibrationStamp.from_dict(value) if isinstance(value, Mapping) else value


def _feature(values: Any, feature: str) -> Any:
    """One feature's (H,) values of a feature -> values mapping or an (H, 6) array."""
    if values is None:
        return None
    if isinstance(values, Mapping):
        return values.get(feature)
    arr = np.asarray(values)
    if arr.ndim == 2 and arr.shape[-1] == len(FEATURES):
        return arr[:, FEATURES.index(feature)]
    raise ValueError(
        f"values must map feature -> (H,) or be an (H, {len(FEATURES)}) array, got shape "
        f"{arr.shape}"
    )


def _level(quantiles: Mapping[Any, Any], q: float, feature: str):
    for k, v in quantiles.items():
        if float(k) == q:
            return _feature(v, feature)
    return None


def _stack(values: list, sizes: list[int]) -> np.ndarray:
    """Per-record (H,) arrays (None: missing) concatenated to one float column (NaN -> null
    later)."""
    parts = [np.full(s, np.nan) if v is None else np.asarray(v, dtype=np.float64).reshape(-1)[:s]
             for v, s in zip(values, sizes)]
    for p, s in zip(parts, sizes):
        if len(p) != s:
            raise ValueError(f"a record has {len(p)} values for {s} steps")
    return np.concatenate(parts) if parts else np.zeros(0)


def empty_scores() -> pa.Table:
    """A scores table with no rows (the columns every scores file has)."""
    cols: dict[str, pa.Array] = {
        "request_id": pa.array([], pa.string()), "symbol": pa.array([], pa.string()),
        "horizon_step": pa.array([], pa.int32()),
        "request_time": pa.array([], pa.timestamp("ns", tz="UTC")),
        "scored_at": pa.array([], pa.timestamp("ns", tz="UTC")),
        "model_sha256": pa.array([], pa.string()), "model_name": pa.array([], pa.string()),
        "step_time": pa.array([], pa.timestamp("ns")), "truth_close": pa.array([], pa.float64()),
        "crps": pa.array([], pa.float64()), "abs_error": pa.array([], pa.float64()),
        "direction_hit": pa.array([], pa.float64()),
    }
    return pa.table(cols)
