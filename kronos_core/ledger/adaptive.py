"""Adaptive calibration online: the scored forecasts continue an ACI calibration's walk.

``kronos calibrate --method aci`` writes a calibration whose state (effective miscoverage
``alpha`` and trailing conformity scores per central level, horizon step and feature; see
``kronos_core.calibration.aci``) is the walk's after the calibration windows. ``OnlineCalibration``
continues that walk with the forecasts the service answered, as their truths arrive:

* each scored step updates the (level, step, feature) slices it has the figures for: the
  forecast recorded that feature's quantiles at both ends of the level's central interval
  (``close_q0.1`` and ``close_q0.9`` for 0.8), and the store's truth. The slices are
  independent walks (as in ``aci.walk``), each taking its steps in the order their truths
  arrived (``accuracy.in_truth_order``); a step is known only once scored, so no update
  uses a truth later than its own (no look-ahead);
* the score pushed into a slice's trailing window is the raw (uncorrected) conformity score
  ``max(log lo - log y, log y - log hi)`` of the model's band. The ledger holds the corrected
  band, moved out by the correction issued with it (``lo * exp(-corr)``, ``hi * exp(corr)``):
  the raw score is the corrected band's score plus that correction, and the truth left the
  issued interval exactly when the corrected band's score is positive. The correction a
  forecast was issued is found by its recorded ``calibration_hash`` in the state's history
  (``<state>.d/<hash>.npy``, one small file per state, kept ``history_days``, 30 by default);
  rows of an unknown hash (another calibration, none, a pruned state) are left out. Exact for open
  and close while the corrected quantiles do not cross (where the answer's rearrangement swapped two
  levels' bounds, the score is that of the band as answered); high and low bands are also moved by
  the candle order (low <= open, close <= high), so their raw scores are approximate;
* the new state is persisted atomically (temporary file, fsync, rename) with a version
  counter (+1 per update that changed it), the hash of its corrections and the time of the
  update, under a file lock beside the state file: several gateways share one state file,
  each update starting from the latest state on disk. A restart resumes it.

A static calibration (``cqr``, ``cqr-r``, or a file fitted per group) never changes: its
stamp is version 0 and the hash of its corrections.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kronos_core.base.atomic import write_bytes_atomically
from kronos_core.base.options import quantile_column
from kronos_core.calibration import aci
from kronos_core.calibration.conformal import Calibration
from kronos_core.data.fileformat import SymbolLock
from kronos_core.ledger.accuracy import in_truth_order
from kronos_core.ledger.errors import StateError
from kronos_core.ledger.records import CalibrationStamp

log = logging.getLogger(__name__)

STATE_FORMAT = "kronos-aci-state/1"
# corrections of past states are kept this long (a forecast is scored within its horizon)
HISTORY_DAYS = 30.0


def corrections_hash(calibration: Calibration) -> str:
    """SHA-256 of a calibration's corrections (C, H, F), levels and features: the name of a
    calibration state (what a ledger row's ``calibration_hash`` holds)."""
    h = hashlib.sha256()
    h.update(
        json.dumps(
            [calibration.method, list(calibration.levels), list(calibration.features)]
        ).encode()
    )
    h.update(np.ascontiguousarray(calibration.corrections, dtype="<f8").tobytes())
    for m in sorted(calibration.members):
        h.update(m.encode())
        h.update(corrections_hash(calibration.members[m]).encode())
    return h.hexdigest()


def default_state_path(ledger_root: str | os.PathLike, calibration_path: str | os.PathLike) -> Path:
    """Where the online state of a calibration file lives by default: in the ledger's folder,
    ``<ledger>/calibration/<file stem>.state.json`` (shared by every gateway of that ledger)."""
    return Path(ledger_root) / "calibration" / f"{Path(calibration_path).stem}.state.json"


@dataclass
class UpdateResult:
    """What one ``update`` did: steps taken in, slice updates made, the version after it."""

    steps: int
    updates: int
    version: int
    changed: bool


class OnlineCalibration:
    """A calibration whose ACI state follows the scored forecasts (see the module docstring).

    ``calibration``: as loaded from its file; ``state_path``: the shared state file (None:
    not adapted, as for a static calibration). ``calibration`` (property) is the one to apply
    now, ``stamp`` names it."""

    def __init__(self, calibration: Calibration, state_path: str | os.PathLike | None = None,
                 history_days: float = HISTORY_DAYS):
        self.fitted = calibration
        self.history_days = float(history_days)
        self.state_path = None if state_path is None else Path(state_path)
        self._current = calibration
        self._version = 0
        self._updated_at: datetime | None = None
        self._hash = corrections_hash(calibration)
        self._file_key: tuple[int, int, int] | None = None
        if self.adaptive:
            self.refresh()

    @classmethod
    def open(cls, calibration_path: str | os.PathLike, state_path: str | os.PathLike | None = None,
             ledger_root: str | os.PathLike | None = None) -> OnlineCalibration:
        """The calibration file ``calibration_path``, its state at ``state_path`` (default:
        ``default_state_path(ledger_root, ...)``; neither: not adapted)."""
        cal = Calibration.load(Path(calibration_path))
        if state_path is None and ledger_root is not None:
            state_path = default_state_path(ledger_root, calibration_path)
        return cls(cal, state_path)

    # -- what is applied -----------------------------------------------------

    @property
    def adaptive(self) -> bool:
        """True for an ACI calibration with a state file (else nothing ever changes)."""
        return (
            self.state_path is not None
            and self.fitted.method == "aci"
            and self.fitted.state is not None
            and not self.fitted.members
        )

    @property
    def calibration(self) -> Calibration:
        return self._current

    @property
    def stamp(self) -> CalibrationStamp:
        return CalibrationStamp(self.fitted.method, self._version, self._hash, self._updated_at)

    @property
    def history_dir(self) -> Path:
        assert self.state_path is not None
        return self.state_path.with_name(self.state_path.name + ".d")

    def issued(self, state_hash: str) -> np.ndarray | None:
        """The corrections (C, H, F) of the state named ``state_hash``, None if unknown."""
        if state_hash == corrections_hash(self.fitted):
            return np.asarray(self.fitted.corrections, dtype=np.float64)
        if state_hash == self._hash:
            return np.asarray(self._current.corrections, dtype=np.float64)
        if self.state_path is None:
            return None
        try:
            return np.load(self.history_dir / f"{state_hash}.npy", allow_pickle=False)
        except (OSError, ValueError):
            return None

    # -- the state file ------------------------------------------------------

    def _fitted_id(self) -> str:
        return corrections_hash(self.fitted) + ":" + str(self.fitted.model.get("sha256"))

    def _read_file(self) -> dict | None:
        assert self.state_path is not None
        try:
            raw = self.state_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateError(f"cannot read calibration state {self.state_path}: {exc}") from exc
        try:
            d = json.loads(raw)
            if d.get("format") != STATE_FORMAT:
                raise ValueError(f"format {d.get('format')!r}, want {STATE_FORMAT}")
        except ValueError as exc:
            raise StateError(f"{self.state_path}: not a calibration state file ({exc})") from exc
        if d.get("fitted") != self._fitted_id():
            log.warning(
                "calibration state %s belongs to another fit of the calibration; starting from the "
                "file",
                self.state_path,
            )
            return None
        return d

    def _apply(self, d: dict | None) -> None:
        if d is None:
            self._current, self._version, self._updated_at = self.fitted, 0, None
            self._hash = corrections_hash(self.fitted)
            return
        assert self.fitted.state is not None
        try:
            st = aci.ACIState.from_dict(d["aci_state"], self.fitted.levels)
            if (
                st.alpha.shape != self.fitted.state.alpha.shape
                or st.scores.shape[1:] != self.fitted.state.scores.shape[1:]
            ):
                raise ValueError("its shape differs from the calibration's")
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"{self.state_path}: unusable ACI state ({exc})") from exc
        self._current = replace(self.fitted, state=st, corrections=st.correction())
        self._version = int(d["version"])
        self._updated_at = datetime.fromisoformat(d["updated_at"]) if d.get("updated_at") else None
        self._hash = corrections_hash(self._current)

    def refresh(self) -> bool:
        """Re-read the state file if it changed (another gateway updated it); True if the
        applied state changed."""
        if not self.adaptive:
            return False
        assert self.state_path is not None
        try:
            st = os.stat(self.state_path)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            key = None
        if key == self._file_key and key is not None:
            return False
        before = self._hash
        self._apply(self._read_file())
        self._file_key = key
        return self._hash != before

    def _persist(self, state: aci.ACIState, version: int, now: datetime) -> None:
        assert self.state_path is not None
        current = replace(self.fitted, state=state, corrections=state.correction())
        state_hash = corrections_hash(current)
        self.history_dir.mkdir(parents=True, exist_ok=True)
        for cal, h in ((self.fitted, corrections_hash(self.fitted)), (current, state_hash)):
            target = self.history_dir / f"{h}.npy"
            if not target.exists():
                buf = io.BytesIO()
                np.save(buf, np.asarray(cal.corrections, dtype=np.float64), allow_pickle=False)
                write_bytes_atomically(target, buf.getvalue())
        doc = {"format": STATE_FORMAT, "fitted": self._fitted_id(), "method": self.fitted.method,
               "version": version, "hash": state_hash, "updated_at": now.isoformat(),
               "levels": list(self.fitted.levels), "features": list(self.fitted.features),
               "aci_state": state.to_dict()}
        write_bytes_atomically(self.state_path, json.dumps(doc).encode())
        self._prune_history(now, {corrections_hash(self.fitted), state_hash})
        self._current, self._version, self._updated_at, self._hash = (
            current, version, now, state_hash,
        )
        st = os.stat(self.state_path)
        self._file_key = (st.st_ino, st.st_size, st.st_mtime_ns)

    def _prune_history(self, now: datetime, keep: set[str]) -> None:
        """Drop the corrections of states older than ``history_days`` (a forecast issued with
        one and scored later is then left out of the walk)."""
        limit = now.timestamp() - self.history_days * 86400
        for p in self.history_dir.glob("*.npy"):
            try:
                if p.stem not in keep and p.stat().st_mtime < limit:
                    p.unlink()
            except OSError:
                pass

    # -- the update ----------------------------------------------------------

    def update(self, scored: pa.Table, now: datetime | None = None) -> UpdateResult:
        """Take in scored steps (``ScoreResult.scored``: forecast columns and ``truth_<f>``):
        the walk continued, the new state persisted. A static calibration: nothing changes."""
        if not self.adaptive or scored.num_rows == 0:
            return UpdateResult(0, 0, self._version, False)
        assert self.state_path is not None
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        with SymbolLock(self.state_path.parent, self.state_path.name):
            self._file_key = None
            self.refresh()  # the latest state on disk, under the lock
            assert self._current.state is not None
            state = self._current.state.copy()
            steps, updates = self._walk(state, in_truth_order(scored))
            if updates == 0:
                return UpdateResult(steps, 0, self._version, False)
            self._persist(state, self._version + 1, now or datetime.now(timezone.utc))
        return UpdateResult(steps, updates, self._version, True)

    def _walk(self, state: aci.ACIState, rows: pa.Table) -> tuple[int, int]:
        """Continue each slice's walk in ``state`` with ``rows`` (in truth order); (rows used, slice
        updates)."""
        cal = self.fitted
        n = rows.num_rows
        step = pc.cast(rows["horizon_step"], pa.int64()).to_numpy() - 1  # (N,) 0-based
        hashes = (
            rows["calibration_hash"].to_pylist()
            if "calibration_hash" in rows.column_names
            else [None] * n
        )
        issued_by_hash = {h: self.issued(h) for h in set(hashes) if h}
        # per slice (c, h, f): its new scores and errors, in row order
        new: dict[tuple[int, int, int], list[tuple[float, float]]] = {}
        used = np.zeros(n, dtype=bool)
        for fi, f in enumerate(cal.features):
            if f"truth_{f}" not in rows.column_names:
                continue
            y = _values(rows, f"truth_{f}")
            for ci, c in enumerate(cal.levels):
                lo_name, hi_name = (
                    quantile_column(f, round((1 - c) / 2, 10)),
                    quantile_column(f, round((1 + c) / 2, 10)),
                )
                if lo_name not in rows.column_names or hi_name not in rows.column_names:
                    continue
                lo, hi = _values(rows, lo_name), _values(rows, hi_name)
                with np.errstate(invalid="ignore", divide="ignore"):
                    e_corr = np.maximum(np.log(lo) - np.log(y), np.log(y) - np.log(hi))  # (N,)
                for i in range(n):
                    issued = issued_by_hash.get(hashes[i]) if hashes[i] else None
                    h = int(step[i])
                    if issued is None or not 0 <= h < issued.shape[1] or not np.isfinite(e_corr[i]):
                        continue
                    corr = float(issued[ci, h, fi])
                    new.setdefault((ci, h, fi), []).append((e_corr[i] + corr, float(e_corr[i] > 0)))
                    used[i] = True
        a = state.nominal
        updates = 0
        for (ci, h, fi), seq in new.items():
            alpha = float(state.alpha[ci, h, fi])
            for _, err in seq:
                alpha = min(max(alpha + state.gamma * (a[ci] - err), -state.gamma), 1 + state.gamma)
            state.alpha[ci, h, fi] = alpha
            trail = np.concatenate([state.scores[:, ci, h, fi], [s for s, _ in seq]])
            state.scores[:, ci, h, fi] = trail[-state.window:]
            updates += len(seq)
        return int(used.sum()), updates


def _values(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(
        pc.fill_null(pc.cast(table[name], pa.float64()), np.nan).to_numpy(zero_copy_only=False),
        dtype=np.float64,
    )


def load_online(
    calibration_path: str | os.PathLike | None, state_path: str | os.PathLike | None = None,
    ledger_root: str | os.PathLike | None = None,
) -> OnlineCalibration | None:
    """``OnlineCalibration.open``, or None without a calibration file. Raises
    ``CalibrationError`` / ``StateError`` naming an unusable file."""
    if calibration_path is None:
        return None
    return OnlineCalibration.open(calibration_path, state_path, ledger_root)
