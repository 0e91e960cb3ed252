"""Recording: every answered forecast appended to the forecast ledger (``kronos_core.ledger``),
off the request path.

The request path only hands the answer (references to its arrays) to a bounded queue
(``LedgerRecorder.submit``: no copy, no disk); one writer thread per gateway process turns
them into ledger rows and appends them. So the answer never waits for the disk, and a full
disk, an unwritable folder or a full queue fail the recording, never the forecast: each is
counted in ``kronos_ledger_write_failures_total`` and logged with the reason.

The writer gathers the answers that arrive within ``gather_s`` of the first one it takes
(``ledger_gather_s``) into one file: a Parquet file and its fsyncs cost ~15 ms of the gateway's
CPU whatever their size, and at one file per request a stream of small requests pays that for
each (and fills the ledger folder with tiny files).

Each gateway writes its own files (``writer_id`` = its replica id), so several gateways on
one shared ledger folder never write the same file.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from service.common.answer import ForecastAnswer
from service.common.metrics import Metrics

log = logging.getLogger(__name__)

_STOP = object()  # the writer thread's end-of-queue marker


CLOSE = 3  # column of the close in FEATURES (open, high, low, close, volume, amount)


def ledger_records(answer: ForecastAnswer) -> list:
    """The answer as ``kronos_core.ledger.ForecastRecord``s (the close's mean, quantiles and, when
    recorded, paths; inline series with the hash of their candles). Only calibrated answers carry
    a calibration stamp."""
    from kronos_core.ledger.records import CalibrationStamp, ForecastRecord, series_hash

    inputs = answer.ledger
    assert inputs is not None, "an answer not to be recorded has no ledger inputs"
    model = (
        answer.model
        if answer.calibrated
        else {k: v for k, v in answer.model.items() if k != "calibration"}
    )
    stamp = _stamp(model, answer.calibration_state if answer.calibrated else None, CalibrationStamp)
    sha = str(model.get("sha256") or "")
    name = model.get("name")
    inline = inputs.source == "inline"
    out = []
    for i, symbol in enumerate(answer.symbols):
        q = answer.quantiles[i]  # (Q, H, 6)
        # arrays where ForecastRecord's annotations say sequences: it reads them with np.asarray
        quantiles: Any = (
            {}
            if q is None
            else {lv: {"close": q[k, :, CLOSE]} for k, lv in enumerate(answer.quantile_levels)}
        )
        mean: Any = {"close": answer.mean[i][:, CLOSE]}
        steps: Any = answer.timestamps[i]
        p = inputs.paths[i]  # (S, H, 6)
        hist = answer.histories[i] if i < len(answer.histories) else None
        out.append(
            ForecastRecord(
                request_id=answer.request_id or "",
                symbol=symbol,
                origin=answer.last_timestamp[i],
                timestamps=steps,
                mean=mean,
                quantiles=quantiles,
                model_sha256=sha,
                model_name=name,
                request_time=inputs.recorded_at,
                calibration=stamp,
                last_close=None if hist is None or not len(hist) else float(hist[-1, CLOSE]),
                frequency=inputs.frequency,
                source=inputs.source,
                series_hash=series_hash(answer.history_timestamps[i], hist)
                if inline and hist is not None
                else None,
                paths=None if p is None else p[:, :, CLOSE],
            )
        )
    return out


def _write_answers(ledger: Any, answers: list[ForecastAnswer]) -> None:
    """The default write: every answer's records, one ``Ledger.record`` call (one file)."""
    ledger.record([record for answer in answers for record in ledger_records(answer)])


def _stamp(model: dict, state: dict | None, stamp_type: type) -> Any:
    """The ``CalibrationStamp`` of the calibration an answer applied: the adaptive state's
    (``state``), else the static file's (version 0), else None (uncalibrated)."""
    if state is not None:
        updated = state.get("updated_at")
        return stamp_type(
            method=str(state.get("method") or "aci"),
            version=int(state.get("version") or 0),
            hash=str(state.get("hash") or ""),
            updated_at=None if updated is None else datetime.fromisoformat(str(updated)),
        )
    cal = model.get("calibration")
    if not cal:
        return None
    return stamp_type(
        method=str(cal.get("method") or ""), version=0, hash=str(cal.get("sha256") or "")
    )


class LedgerRecorder:
    """A bounded queue and one writer thread appending answers to a ledger.

    ``open_ledger()`` is called once, in the writer thread, when the first batch arrives (a
    ledger folder that cannot be made fails there, counted, and is tried again with the next
    answer). ``write(ledger, answers)`` appends the forecasts of a list of answers as one file;
    it raises on failure, which fails them all (default: ``ledger.record`` of their
    ``ledger_records``). ``gather_s``: how long the writer waits, after taking an answer, for
    more to write with it (0: no wait; what is queued already still shares the file); at most
    ``max_gather`` answers a file.
    ``flush`` and ``close`` cut the wait short."""

    def __init__(
        self,
        open_ledger: Callable[[], Any],
        metrics: Metrics,
        max_queue: int = 1024,
        write: Callable[[Any, list[ForecastAnswer]], None] | None = None,
        gather_s: float = 0.0,
        max_gather: int = 256,
    ):
        self._open = open_ledger
        self._write = write or _write_answers
        self.gather_s = float(gather_s)
        self.max_gather = max(1, int(max_gather))
        self._hurry = threading.Event()  # flush or close: write what is gathered now
        self.metrics = metrics
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._ledger: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.written = 0  # answers appended
        self.failed = 0  # answers not recorded (write failure or full queue)
        self.last_error: str | None = None

    # ------------------------------------------------------------------ request path
    def submit(self, answer: ForecastAnswer) -> bool:
        """Queue an answer for the writer; never blocks, never raises. False: not queued (the
        queue is full: the writer is stuck on a slow disk), counted as a failure."""
        if not answer.symbols or answer.ledger is None:
            return True
        self._ensure_thread()
        try:
            self._queue.put_nowait(answer)
            return True
        except queue.Full:
            self._failed(answer, f"writer queue full ({self._queue.maxsize} requests waiting)")
            return False

    # ------------------------------------------------------------------ writer thread
    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="kronos-ledger-writer", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            taken = self._gather(self._queue.get())
            try:
                answers = [a for a in taken if a is not _STOP]
                if answers:
                    self._append(answers)
            finally:
                for _ in taken:
                    self._queue.task_done()
            if taken[-1] is _STOP:
                return

    def _gather(self, first: Any) -> list:
        """``first`` and what else arrives within ``gather_s`` of it (up to ``max_gather``
        answers; the stop marker ends the list)."""
        taken = [first]
        deadline = time.monotonic() + self.gather_s
        while taken[-1] is not _STOP and len(taken) < self.max_gather:
            left = deadline - time.monotonic()
            if left <= 0 or self._hurry.is_set():
                try:  # what is queued already still goes into this file
                    taken.append(self._queue.get_nowait())
                    continue
                except queue.Empty:
                    break
            try:
                taken.append(self._queue.get(timeout=min(left, 0.05)))
            except queue.Empty:
                continue
        return taken

    def _append(self, answers: list[ForecastAnswer]) -> None:
        try:
            if self._ledger is None:
                self._ledger = self._open()
            self._write(self._ledger, answers)
        except Exception as exc:  # disk full, folder unwritable, ...: the answers went out already
            for answer in answers:
                self._failed(answer, f"{type(exc).__name__}: {exc}")
            return
        self.written += len(answers)
        self.metrics.ledger_rows.inc(sum(len(a.symbols) for a in answers))

    def _failed(self, answer: ForecastAnswer, why: str) -> None:
        self.failed += 1
        self.last_error = why
        self.metrics.ledger_write_failures.inc()
        log.warning(
            "ledger: request %s's %d forecast(s) not recorded: %s",
            answer.request_id,
            len(answer.symbols),
            why,
        )

    # ------------------------------------------------------------------ control
    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every queued answer is written (or failed); False past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        self._hurry.set()
        try:
            while self._queue.unfinished_tasks:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.01)
            return True
        finally:
            self._hurry.clear()

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued (up to ``timeout_s``) and stop the thread."""
        if self._thread is None or not self._thread.is_alive():
            return
        self._hurry.set()
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)
