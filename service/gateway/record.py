"""Recording: every answered forecast appended to the forecast ledger (``kronos_core.ledger``),
off the request path.

The request path only hands references to the answer's arrays to a bounded queue
(``LedgerRecorder.submit``: no copy, no disk); one writer thread per gateway process turns
them into ledger rows and appends them. So the answer never waits for the disk, and a full
disk, an unwritable folder or a full queue fail the recording, never the forecast: each is
counted in ``kronos_ledger_write_failures_total`` and logged with the reason.

Each gateway writes its own files (``writer_id`` = its replica id), so several gateways on
one shared ledger folder never write the same file.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from service.common.metrics import Metrics
from service.common.schemas import ForecastRequest
from service.gateway.gather import Outcome

log = logging.getLogger(__name__)

_STOP = object()  # the writer thread's end-of-queue marker


CLOSE = 3  # column of the close in FEATURES (open, high, low, close, volume, amount)


@dataclass
class ForecastBatch:
    """One answered request's forecasts, as the writer thread receives them: references to the
    answer's arrays, turned into ledger records (``records``) only in the writer."""

    request_id: str
    recorded_at: np.datetime64  # UTC, ns: when the answer was made
    model: dict  # the answer's model block (name, sha256, calibration ...)
    calibration_state: dict | None  # the stamp of the calibration applied (method, version, hash, updated_at)
    source: str  # "store" or "inline"
    frequency: str | None
    symbols: list[str]
    origins: list[np.datetime64]  # each series' last input candle
    timestamps: list[np.ndarray]  # (H,) datetime64[ns] per series
    mean: list[np.ndarray]  # (H, 6) per series
    quantile_levels: tuple[float, ...]
    quantiles: list[np.ndarray | None]  # (Q, H, 6) per series
    paths: list[np.ndarray | None]  # (S, H, 6) per series, when recorded
    histories: list[np.ndarray] = field(default_factory=list)  # (L, 6) input candles per series
    history_timestamps: list[np.ndarray] = field(default_factory=list)  # (L,) their times (inline: hashed)

    def __len__(self) -> int:
        return len(self.symbols)

    def records(self) -> list:
        """The batch as ``kronos_core.ledger.ForecastRecord``s (the close's mean, quantiles and,
        when recorded, paths; inline series with the hash of their candles)."""
        from kronos_core.ledger.records import CalibrationStamp, ForecastRecord, series_hash

        stamp = _stamp(self.model, self.calibration_state, CalibrationStamp)
        sha = str(self.model.get("sha256") or "")
        name = self.model.get("name")
        out = []
        for i, symbol in enumerate(self.symbols):
            q = self.quantiles[i]  # (Q, H, 6)
            # arrays where ForecastRecord's annotations say sequences: it reads them with np.asarray
            quantiles: Any = {} if q is None else {lv: {"close": q[k, :, CLOSE]}
                                                   for k, lv in enumerate(self.quantile_levels)}
            mean: Any = {"close": self.mean[i][:, CLOSE]}
            steps: Any = self.timestamps[i]
            p = self.paths[i]  # (S, H, 6)
            hist = self.histories[i] if i < len(self.histories) else None
            inline = self.source == "inline"
            out.append(ForecastRecord(
                request_id=self.request_id, symbol=symbol, origin=self.origins[i], timestamps=steps,
                mean=mean, quantiles=quantiles, model_sha256=sha, model_name=name,
                request_time=self.recorded_at, calibration=stamp,
                last_close=None if hist is None or not len(hist) else float(hist[-1, CLOSE]),
                frequency=self.frequency, source=self.source,
                series_hash=series_hash(self.history_timestamps[i], hist) if inline and hist is not None else None,
                paths=None if p is None else p[:, :, CLOSE],
            ))
        return out


def _stamp(model: dict, state: dict | None, stamp_type: type) -> Any:
    """The ``CalibrationStamp`` of the calibration an answer applied: the adaptive state's
    (``state``), else the static file's (version 0), else None (uncalibrated)."""
    if state is not None:
        updated = state.get("updated_at")
        return stamp_type(method=str(state.get("method") or "aci"), version=int(state.get("version") or 0),
                          hash=str(state.get("hash") or ""),
                          updated_at=None if updated is None else datetime.fromisoformat(str(updated)))
    cal = model.get("calibration")
    if not cal:
        return None
    return stamp_type(method=str(cal.get("method") or ""), version=0, hash=str(cal.get("sha256") or ""))


def batch_from_outcome(req: ForecastRequest, out: Outcome, request_id: str, calibration_state: dict | None = None,
                       record_paths: bool = False) -> ForecastBatch:
    """What to record of one answer; cheap (lists of references, no copy, no hashing). Only
    calibrated answers carry a calibration stamp."""
    return ForecastBatch(
        request_id=request_id,
        recorded_at=np.datetime64(time.time_ns(), "ns"),
        model=out.model if out.calibrated else {k: v for k, v in out.model.items() if k != "calibration"},
        calibration_state=calibration_state if out.calibrated else None,
        source="inline" if req.series is not None else "store",
        frequency=req.frequency,
        symbols=list(out.symbols),
        origins=list(out.last_timestamp),
        timestamps=list(out.timestamps),
        mean=list(out.mean),
        quantile_levels=tuple(out.quantile_levels),
        quantiles=list(out.quantiles),
        paths=list(out.paths) if record_paths else [None] * len(out.symbols),
        histories=list(out.histories),
        history_timestamps=list(out.history_timestamps),
    )


class LedgerRecorder:
    """A bounded queue and one writer thread appending ``ForecastBatch``es to a ledger.

    ``open_ledger()`` is called once, in the writer thread, when the first batch arrives (a
    ledger folder that cannot be made fails there, counted, and is tried again with the next
    batch). ``write(ledger, batch)`` appends one batch; it raises on failure (default:
    ``ledger.record(batch.records())``)."""

    def __init__(self, open_ledger: Callable[[], Any], metrics: Metrics, max_queue: int = 1024,
                 write: Callable[[Any, ForecastBatch], None] | None = None):
        self._open = open_ledger
        self._write = write or (lambda ledger, batch: ledger.record(batch.records()))
        self.metrics = metrics
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._ledger: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.written = 0  # batches appended
        self.failed = 0  # batches not recorded (write failure or full queue)
        self.last_error: str | None = None

    # ------------------------------------------------------------------ request path
    def submit(self, batch: ForecastBatch) -> bool:
        """Queue ``batch`` for the writer; never blocks, never raises. False: not queued (the
        queue is full: the writer is stuck on a slow disk), counted as a failure."""
        if not len(batch):
            return True
        self._ensure_thread()
        try:
            self._queue.put_nowait(batch)
            return True
        except queue.Full:
            self._failed(batch, f"writer queue full ({self._queue.maxsize} requests waiting)")
            return False

    # ------------------------------------------------------------------ writer thread
    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="kronos-ledger-writer", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            try:
                if batch is _STOP:
                    return
                self._append(batch)
            finally:
                self._queue.task_done()

    def _append(self, batch: ForecastBatch) -> None:
        try:
            if self._ledger is None:
                self._ledger = self._open()
            self._write(self._ledger, batch)
        except Exception as exc:  # disk full, folder unwritable, ...: the answer went out already
            self._failed(batch, f"{type(exc).__name__}: {exc}")
            return
        self.written += 1
        self.metrics.ledger_rows.inc(len(batch))

    def _failed(self, batch: ForecastBatch, why: str) -> None:
        self.failed += 1
        self.last_error = why
        self.metrics.ledger_write_failures.inc()
        log.warning("ledger: request %s's %d forecast(s) not recorded: %s", batch.request_id, len(batch), why)

    # ------------------------------------------------------------------ control
    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every queued batch is written (or failed); False past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued (up to ``timeout_s``) and stop the thread."""
        if self._thread is None or not self._thread.is_alive():
            return
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)
