"""Live accuracy in the service: the background scoring pass of the gateways and the answer
of ``GET /v1/accuracy``, both over the forecast ledger (``kronos_core.ledger``).

Every ``score_interval_s`` each gateway tries the ledger folder's lock file
(``scorer.lock``, ``fcntl.flock``, non-blocking); the one that gets it runs the pass, the
others skip this round. A pass: scores what became scorable (``kronos_core.ledger.score``
against the store), feeds the newly scored truths to the adaptive calibration state
(``service.replica.calibration``, method aci only), enforces the retention, and sets the accuracy
gauges from ``accuracy`` over the rolling window. A lock rather than "gateway 0": Serve's
replica ids are random and a replica that dies is replaced under a new one, so no gateway is
reliably the first; with the lock any surviving gateway takes over at the next interval.
The lock is per folder, so it also holds across nodes on a shared filesystem that honours
``flock`` (NFSv4, CephFS; not an object store: see docs/ledger.md, "In the service").
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.common.metrics import Metrics
from service.common.settings import Settings
from service.replica.calibration import state_path

if TYPE_CHECKING:
    import pyarrow as pa

    from kronos_core.ledger.adaptive import OnlineCalibration
    from kronos_core.ledger.scoring import WaitingFiles

log = logging.getLogger(__name__)

LOCK_FILE = "scorer.lock"
INDEX_FILE = "scoring-index.json"  # kronos_core.ledger.scoring.WaitingFiles
# The index is saved after a gateway's first pass, then at most this often, and when the gateway
# stops. It is only a shortcut for the next start (a file it does not know, or knows as waiting
# for an older step, is read again), while saving it is O(waiting files): a sample-store ledger of
# 3,281 files (424k waiting symbol entries, a 16 MB index) took 1.2 s of CPU to save, every pass.
INDEX_SAVE_INTERVAL_S = 600.0


@contextlib.contextmanager
def scoring_lock(ledger_dir: str | Path) -> Iterator[bool]:
    """True while this process holds the ledger's scoring lock, False when another one does."""
    path = Path(ledger_dir) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _figures(d: dict | None) -> dict[str, Any]:
    """One span's figures in the answer's shape (``AccuracyFigures``)."""
    d = d or {}
    cov = d.get("coverage") or {}
    return {
        "scored": int(d.get("scored") or d.get("count") or 0),
        "coverage": {_level(k): (None if v is None else float(v)) for k, v in cov.items()},
        "crps": _num(d.get("crps")),
        "mae": _num(d.get("mae")),
        "direction_hit": _num(d.get("direction_accuracy")),
    }


def _level(k: Any) -> str:
    return f"{float(k):g}"


def _num(v: Any) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if v == v and abs(v) != float("inf") else None  # JSON has no NaN


class LiveAccuracy:
    """The ledger seen from one gateway: the scoring pass and the accuracy answers.

    ``ledger()`` opens the ledger (read side); ``store`` is the gateway's store reader;
    ``adaptive`` (optional) is fed the truths a pass scored."""

    def __init__(self, settings: Settings, ledger_dir: str, store: Any, metrics: Metrics,
                 open_ledger: Callable[[], Any], adaptive: Any = None):
        self.settings = settings
        self.ledger_dir = ledger_dir
        self.store = store
        self.metrics = metrics
        self._open = open_ledger
        self._ledger: Any = None
        self.adaptive = adaptive
        self.passes = 0  # passes run by this gateway (the lock was ours)
        self.last_scored: datetime | None = None
        # files not yet due are not read again (kronos_core.ledger.scoring); this gateway's first
        # pass resumes from the index the last pass (of any gateway) saved in the ledger folder
        self.waiting: WaitingFiles | None = None
        self.index_path = Path(ledger_dir) / INDEX_FILE
        self.index_saved_at: float | None = None  # time.monotonic() of this gateway's last save
        self._index_dirty = False  # passes since that save
        self._pass_lock = threading.Lock()  # a pass, or the save at stop
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def ledger(self) -> Any:
        if self._ledger is None:
            self._ledger = self._open()
        return self._ledger

    def window(self) -> int:
        return int(self.settings.score_window_steps)

    # ------------------------------------------------------------------ background scoring
    def start(self) -> None:
        """Start the background scoring thread (no-op when the interval is 0). A thread, not a
        task: a pass reads files and computes for a while, and must not hold the event loop."""
        self.metrics.last_scored.set(time.time())  # until a pass finds a score in the ledger
        self.volume_gauges()
        if self.settings.score_interval_s > 0 and self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="kronos-ledger-scorer", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop the background passes, and save the scoring index if a pass changed it since its
        last save."""
        self._stop.set()
        with self._pass_lock:
            if self._index_dirty:
                self._save_index()

    def _save_index(self) -> None:
        assert self.waiting is not None
        try:
            self.waiting.save(self.index_path)
        except OSError as exc:  # only a shortcut for the next start: never fails the pass
            log.warning("scoring index not saved: %s", exc)
            return
        self.index_saved_at, self._index_dirty = time.monotonic(), False

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.score_interval_s):
            try:
                self.score_pass()
            except Exception:  # a pass that fails is logged; the next one tries again
                log.exception("ledger scoring pass failed")

    def score_pass(self) -> dict | None:
        """One pass, if the lock is ours: score, update the adaptive state, enforce retention,
        set the gauges. Returns what it did (None: another gateway holds the lock)."""
        from kronos_core.ledger.scoring import WaitingFiles, score

        with self._pass_lock, scoring_lock(self.ledger_dir) as mine:
            if not mine:
                return None
            t0 = time.perf_counter()
            if self.waiting is None:
                self.waiting = WaitingFiles.load(self.index_path)
            scored = score(self.ledger, self.store, waiting=self.waiting)
            self._index_dirty = True
            saved = self.index_saved_at
            if saved is None or time.monotonic() - saved >= INDEX_SAVE_INTERVAL_S:
                self._save_index()
            n_new = int(scored.scores.num_rows)
            if n_new:
                self.last_scored = datetime.now(timezone.utc)
            adaptive = None
            if self.adaptive is not None and n_new:
                adaptive = self.adaptive.update(scored.scored)
            s = self.settings
            if s.ledger_retention_days or s.ledger_retention_bytes:
                removed = self.ledger.enforce_retention()
                if removed:
                    log.info("ledger retention: %d file(s) removed", len(removed))
            self.set_gauges()
            self.passes += 1
            took = time.perf_counter() - t0
            log.info("ledger scoring pass: %d step(s) newly scored in %.2f s", n_new, took)
            return {"scored": n_new, "adaptive": adaptive, "seconds": took}

    def volume_gauges(self) -> None:
        """``kronos_ledger_volume_bytes``: free and total bytes of the ledger's file system."""
        import shutil

        try:
            usage = shutil.disk_usage(self.ledger_dir)
        except OSError as exc:  # the folder gone: the write-failure alert tells
            log.warning("ledger volume: %s", exc)
            return
        self.metrics.ledger_volume.labels(kind="free").set(usage.free)
        self.metrics.ledger_volume.labels(kind="total").set(usage.total)

    def set_gauges(self) -> None:
        """The accuracy gauges from the rolling window, one set per model (no per-symbol label),
        the last score's time and the ledger's volume."""
        import pyarrow.compute as pc

        from kronos_core.ledger.accuracy import accuracy

        self.volume_gauges()
        scores = self.ledger.read_scores()
        if not scores.num_rows:
            return
        latest = pc.max(scores["scored_at"]).as_py()
        if latest is not None:
            self.metrics.last_scored.set(latest.timestamp())
        names = dict(
            zip(scores["model_sha256"].to_pylist(), scores["model_name"].to_pylist(), strict=True)
        )
        for sha, name in names.items():
            label = model_label(sha, name)
            res = accuracy(
                scores.filter(pc.equal(scores["model_sha256"], sha)), window=self.window()
            )
            rolling, everything = _figures(res.get("rolling")), _figures(res.get("all_time"))
            for level, cov in rolling["coverage"].items():
                if cov is not None:
                    self.metrics.forecast_coverage.labels(model=label, level=level).set(cov)
            if rolling["crps"] is not None:
                self.metrics.forecast_crps.labels(model=label).set(rolling["crps"])
            self.metrics.forecast_window_scored.labels(model=label).set(rolling["scored"])
            self.metrics.forecasts_scored.labels(model=label).set(everything["scored"])

    # ------------------------------------------------------------------ GET /v1/accuracy
    def answer(
        self,
        model: str | None = None,
        symbol: str | None = None,
        since: datetime | None = None,
        horizon_step: int | None = None,
    ) -> dict:
        """The body of ``GET /v1/accuracy`` (``service.common.schemas.AccuracyResponse``)."""
        from kronos_core.ledger.accuracy import accuracy

        res = accuracy(
            self.ledger,
            model=model,
            symbol=symbol,
            since=utc_since(since),
            horizon_step=horizon_step,
            window=self.window(),
        )
        body = _answer(
            self.settings,
            model,
            symbol,
            since,
            horizon_step,
            res.get("rolling"),
            res.get("all_time"),
        )
        body["last_scored"] = (
            None if self.last_scored is None else self.last_scored.isoformat(timespec="seconds")
        )
        return body


def utc_since(since: datetime | None) -> datetime | None:
    """``since`` as an aware UTC time (naive: taken as UTC), clipped to the years a ledger can
    hold (1678-2261, nanosecond timestamps), so any date a client sends is a valid filter."""
    if since is None:
        return None
    if since.tzinfo is None:
        since = since.replace(tzinfo=timezone.utc)
    lo, hi = datetime(1678, 1, 2, tzinfo=timezone.utc), datetime(2261, 12, 31, tzinfo=timezone.utc)
    # compared as aware times (no conversion: year 1 at +01:00 has no UTC datetime)
    return lo if since < lo else hi if since > hi else since.astimezone(timezone.utc)


def _answer(
    settings: Settings, model, symbol, since, horizon_step, rolling, all_time, detail: str = ""
) -> dict:
    return {
        "model": model,
        "symbol": symbol,
        "since": None if since is None else since.isoformat(),
        "horizon_step": horizon_step,
        "window_steps": settings.score_window_steps,
        "rolling": _figures(rolling),
        "all_time": _figures(all_time),
        "last_scored": None,
        "detail": detail,
    }


def ledger_off_answer(settings: Settings, model, symbol, since, horizon_step) -> dict:
    """``GET /v1/accuracy`` with the ledger ``off``: nothing recorded, nothing scored."""
    return _answer(
        settings,
        model,
        symbol,
        since,
        horizon_step,
        None,
        None,
        "the forecast ledger is off (KRONOS_LEDGER_DIR=off): nothing is recorded or scored",
    )


def model_label(sha256: str | None, name: str | None) -> str:
    """The ``model`` label of the accuracy gauges: the model's name, else its SHA-256's first 12
    digits (bounded: one per model the ledger holds, no per-symbol label)."""
    return str(name or (sha256 or "unknown")[:12])


def writer_name(gateway_id: str | None) -> str:
    """A file-name-safe writer id for this gateway's ledger files (its Serve replica id, else its
    pid)."""
    import re

    raw = gateway_id or f"pid{os.getpid()}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-")[-64:] or f"pid{os.getpid()}"


def ledger_service(settings: Settings, store: Any, metrics: Metrics, gateway_id: str | None):
    """(recorder, live accuracy) of one gateway, or (None, None) with the ledger ``off``.

    Nothing touches the disk here: the recorder opens the ledger in its writer thread on the
    first answer, the accuracy side on its first pass or query, so an unwritable ledger
    folder never stops the gateway from starting (the failures are counted and logged)."""
    from service.gateway.record import LedgerRecorder

    ledger_dir = settings.resolved_ledger_dir()
    if ledger_dir is None:
        log.debug("forecast ledger off")  # said once at start (service.preflight)
        return None, None
    writer = writer_name(gateway_id)

    def open_ledger():
        from kronos_core.ledger.ledger import Ledger

        return Ledger(
            ledger_dir,
            writer_id=writer,
            keep_paths=settings.ledger_paths,
            retention_days=settings.ledger_retention_days or None,  # 0: keep all
            retention_bytes=settings.ledger_retention_bytes,
        )

    recorder = LedgerRecorder(
        open_ledger, metrics, settings.ledger_queue, gather_s=settings.ledger_gather_s
    )
    adaptive = GatewayAdaptation.for_settings(settings)
    live = LiveAccuracy(settings, ledger_dir, store, metrics, open_ledger, adaptive)
    log.info(
        "forecast ledger in %s (writer %s), scoring every %g s",
        ledger_dir,
        writer,
        settings.score_interval_s,
    )
    return recorder, live


class GatewayAdaptation:
    """The scorer's side: the scored steps fed to the ACI state (the gateway holding the
    scoring lock only)."""

    def __init__(self, online: OnlineCalibration):
        self.online = online

    @classmethod
    def for_settings(cls, settings: Settings) -> GatewayAdaptation | None:
        """None unless an ACI calibration is configured and the ledger is on."""
        if not settings.calibration:
            return None
        from kronos_core.calibration.conformal import Calibration
        from kronos_core.ledger.adaptive import OnlineCalibration

        try:
            cal = Calibration.load(settings.calibration)
        except Exception as exc:  # the replicas refuse it loudly; the scorer just does not adapt
            log.warning("adaptive calibration off: %s", exc)
            return None
        path = state_path(settings, cal.method)
        online = OnlineCalibration(cal, path)
        return cls(online) if online.adaptive else None

    def update(self, scored: pa.Table) -> dict:
        """Feed one scoring pass's ``ScoreResult.scored`` rows; returns what changed."""
        res = self.online.update(scored)
        if res.changed:
            log.info(
                "adaptive calibration: %d step(s) taken in, version %d", res.steps, res.version
            )
        return {
            "steps": res.steps,
            "updates": res.updates,
            "version": res.version,
            "changed": res.changed,
        }
