"""Scoring recorded forecasts against the store's candles once their truth exists.

**Truth and completeness.** The truth of a forecast step is the store's candle at exactly
the step's time (``step_time``, the store's wall clock). The store holds closed bars only
(``kronos import`` appends finished candles), so a step is scorable exactly when that
candle is there; until then it waits. A step whose bar the store skips (a gap) waits too.

**No look-ahead.** A step is scored from one candle, the one at its own time, and (for the
direction) the close at the forecast's origin, recorded with it or read at exactly the
origin's time. No other candle is read for it: a candle appended later than a step's own
is used only for the steps at that candle's time. A step is scored once: its score is
persisted and never recomputed, even if the candle is later re-imported with other values.

**The scores** (per step, of the close; ``kronos_core.eval.metrics``'s functions):

* ``crps``: 2 x the mean pinball loss over the recorded quantile levels (the quantile
  approximation of the CRPS, CRPS = 2 * integral of the pinball loss over the levels,
  Gneiting & Raftery 2007; with few levels it is a coarse approximation, null without quantiles);
* ``covered_<c>``: 1 where the truth lies in the central interval of level ``c``
  (quantiles ``(1 - c) / 2`` and ``(1 + c) / 2``, both recorded), else 0;
* ``abs_error``: |mean close - truth close|;
* ``direction_hit``: 1 when the mean's move from the origin close has the truth's sign,
  0.5 when either is no move.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kronos_core.base.atomic import write_bytes_atomically
from kronos_core.base.candles import FEATURES
from kronos_core.base.options import quantile_label
from kronos_core.data.errors import StoreError
from kronos_core.data.fileformat import SymbolLock
from kronos_core.data.store_reader import KlineReader
from kronos_core.eval import metrics as m
from kronos_core.ledger.errors import LedgerWriteError
from kronos_core.ledger.ledger import (
    Ledger,
    empty_forecasts,
    filter_rows,
    partition_files,
    read_files,
)
from kronos_core.ledger.records import empty_scores, utc_ns

log = logging.getLogger(__name__)

INDEX_VERSION = 1  # of WaitingFiles.to_json
KEY = ("request_id", "symbol", "horizon_step")  # one score per forecast step
CARRIED = (
    "request_time", "model_sha256", "model_name", "calibration_method", "calibration_version",
    "calibration_hash", "frequency", "source", "origin", "step_time", "horizon",
)
CLOSE_Q = re.compile(r"^close_q(.+)$")
LOCK_NAME = "score"  # ROOT/.score.lock serializes scorers


@dataclass
class ScoreResult:
    """What one ``score`` call did: ``scores`` the new score rows (persisted in ``path``),
    ``scored`` the same steps with their forecast columns and truths (``truth_<feature>``,
    what an online calibration update needs), ``waiting`` steps with no truth yet."""

    scores: pa.Table
    scored: pa.Table
    waiting: int = 0
    path: Path | None = None
    skipped_files: list[tuple[Path, str]] = field(default_factory=list)

    def per_model(self) -> dict[str, int]:
        """New scores per model SHA-256."""
        if self.scores.num_rows == 0:
            return {}
        counts = (
            self.scores.group_by("model_sha256").aggregate([("model_sha256", "count")]).to_pydict()
        )
        return dict(zip(counts["model_sha256"], counts["model_sha256_count"]))


@dataclass
class WaitingFiles:
    """A scorer's in-process memory of forecast files whose steps still wait for their truth:
    for each file (``partition/name``), the earliest waiting step of each (symbol, frequency).
    A later pass reads such a file again only once the store's last candle of one of its symbols
    reached that step; a file that was never read (new), or is not in the memory (a new
    process), is read. Ledger files are immutable once written, so what a file waits for changes
    only with the store. Without it every pass read the whole ledger and every symbol's candles:
    8-10 s of CPU a minute in the gateway for a 27 MB ledger of forecasts not yet due."""

    waits: dict[str, dict[tuple[str, str | None], int]] = field(default_factory=dict)

    def due(self, key: str, last_stored: Any) -> bool:
        """Whether file ``key`` may hold a step the store now has: not remembered, or one of its
        symbols' last stored candle (``last_stored(symbol, frequency)`` in ns, None: unknown) is at
        or past the step it waits for."""
        waits = self.waits.get(key)
        if waits is None:
            return True
        for (symbol, frequency), first_step in waits.items():
            last = last_stored(symbol, frequency)
            if last is None or last >= first_step:
                return True
        return False

    # ---- the persisted index: the first pass after a start resumes from it -----------------------
    def to_json(self) -> bytes:
        """The memory as a small JSON document (file -> [[symbol, frequency, first waiting
        step]])."""
        files = {
            key: [
                [s, f, int(t)]
                for (s, f), t in sorted(waits.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
            ]
            for key, waits in sorted(self.waits.items())
        }
        return json.dumps(
            {"version": INDEX_VERSION, "files": files}, separators=(",", ":")
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> WaitingFiles:
        """``to_json``'s document back; raises ``ValueError`` on anything else."""
        doc = json.loads(data)
        if (
            not isinstance(doc, dict)
            or doc.get("version") != INDEX_VERSION
            or not isinstance(doc.get("files"), dict)
        ):
            raise ValueError("not a scoring index of this version")
        waits: dict[str, dict[tuple[str, str | None], int]] = {}
        for key, rows in doc["files"].items():
            waits[str(key)] = {
                (str(s), None if f is None else str(f)): int(step) for s, f, step in rows
            }
        return cls(waits)

    @classmethod
    def load(cls, path: str | os.PathLike) -> WaitingFiles:
        """The index saved at ``path``; empty (every file is read once) when there is none or it
        cannot be read, which costs one full pass, never a wrong score: a file the index does not
        know is read."""
        try:
            return cls.from_json(Path(path).read_bytes())
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError, TypeError) as exc:
            log.warning(
                "scoring index %s not used (%s); the first pass reads every waiting file", path, exc
            )
            return cls()

    def save(self, path: str | os.PathLike) -> None:
        """Write the index atomically (a reader sees the old or the new one, never half)."""
        write_bytes_atomically(Path(path), self.to_json())


def _file_key(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _last_stored(store: KlineReader) -> Any:
    """``(symbol, frequency) -> ns`` of the store's last candle of the symbol (None when the store
    cannot tell), each asked once (the metadata read is a cached file's footer)."""
    seen: dict[tuple[str, str | None], int | None] = {}

    def last(symbol: str, frequency: str | None) -> int | None:
        k = (symbol, frequency)
        if k not in seen:
            try:
                text = store.metadata(symbol, frequency).get("last")
                seen[k] = None if text is None else int(pd.Timestamp(text).as_unit("ns").value)
            except (StoreError, ValueError, TypeError):
                seen[k] = None
        return seen[k]

    return last


def close_levels(table: pa.Table) -> list[float]:
    """The quantile levels that have a close column in ``table``, ascending."""
    out = []
    for name in table.column_names:
        hit = CLOSE_Q.match(name)
        if hit:
            try:
                out.append(float(hit.group(1)))
            except ValueError:
                continue
    return sorted(out)


def central_pairs(levels: list[float]) -> list[tuple[float, float, float]]:
    """(nominal c, lower level, upper level) of each central interval both of whose levels are in
    ``levels``."""
    have = {quantile_label(q) for q in levels}
    out = []
    for q in levels:
        if q < 0.5:
            (c, lo, hi), = m.central_levels([round(1 - 2 * q, 10)])
            if quantile_label(lo) in have and quantile_label(hi) in have:
                out.append((c, lo, hi))
    return sorted(out)


def _col(table: pa.Table, name: str) -> np.ndarray:
    """A numeric column as float64 with NaN for nulls (N,)."""
    return np.asarray(
        pc.fill_null(pc.cast(table[name], pa.float64()), np.nan).to_numpy(zero_copy_only=False),
        dtype=np.float64,
    )


def step_scores(
    table: pa.Table, truth_close: np.ndarray, last_close: np.ndarray
) -> dict[str, np.ndarray]:
    """The scores (N,) of forecast rows ``table`` against their truths (N,), origin closes (N,).
    Null (NaN) where a score cannot be computed (no quantiles, no origin close)."""
    truth = truth_close[:, None]  # (N, 1): one step per row
    mean = _col(table, "mean_close")[:, None]  # (N, 1)
    levels = close_levels(table)
    out: dict[str, np.ndarray] = {}
    if levels:
        pin = np.stack(
            [
                m.pinball_elements(_col(table, f"close_q{quantile_label(q)}")[:, None], truth, q)[
                    :, 0
                ]
                for q in levels
            ]
        )  # (Q, N), NaN where a row lacks the level
        n_levels = np.isfinite(pin).sum(axis=0)
        with np.errstate(invalid="ignore"):
            out["crps"] = np.where(
                n_levels > 0, 2.0 * np.nansum(pin, axis=0) / np.maximum(n_levels, 1), np.nan
            )
    else:
        out["crps"] = np.full(len(truth_close), np.nan)
    out["abs_error"] = m.abs_errors(mean, truth)[:, 0]
    hits = m.direction_hits(mean, truth, last_close)  # (N,)
    out["direction_hit"] = np.where(np.isfinite(last_close) & np.isfinite(mean[:, 0]), hits, np.nan)
    for c, lo, hi in central_pairs(levels):
        low = _col(table, f"close_q{quantile_label(lo)}")[:, None]
        high = _col(table, f"close_q{quantile_label(hi)}")[:, None]
        cov = m.covered(low, high, truth)[:, 0]
        out[f"covered_{quantile_label(c)}"] = np.where(
            np.isfinite(low[:, 0]) & np.isfinite(high[:, 0]), cov, np.nan
        )
    return out


def _truths(
    store: KlineReader, symbol: str, frequency: str | None, times: np.ndarray, origins: np.ndarray,
    require_next_bar: bool = False,
) -> tuple[np.ndarray, np.ndarray] | None:
    """(values (N, 6) at exactly ``times`` (NaN where the store has no candle there, or, with
    ``require_next_bar``, no later one), closes (N,) at exactly ``origins``), or None when the
    store cannot read the symbol."""
    lo, hi = int(min(times.min(), origins.min())), int(times.max())
    try:
        end = None if require_next_bar else np.datetime64(hi, "ns")
        frame = store.read(symbol, frequency, start=np.datetime64(lo, "ns"), end=end)
    except StoreError:
        return None
    ts = frame["timestamps"].to_numpy().astype("datetime64[ns]").astype(np.int64)  # (L,)
    values = frame[list(FEATURES)].to_numpy(dtype=np.float64)  # (L, 6)

    def at(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        i = np.clip(np.searchsorted(ts, t), 0, max(len(ts) - 1, 0))
        hit = (len(ts) > 0) & (ts[i] == t) if len(ts) else np.zeros(len(t), dtype=bool)
        return i, hit

    i, hit = at(times)
    if require_next_bar and len(ts):
        hit &= times < ts[-1]  # a later bar exists: the one at ``times`` is closed
    out = np.full((len(times), len(FEATURES)), np.nan)
    if len(ts):
        out[hit] = values[i[hit]]
    j, ohit = at(origins)
    last = np.full(len(origins), np.nan)
    if len(ts):
        last[ohit] = values[j[ohit], FEATURES.index("close")]
    return out, last


def _row_groups(symbols: np.ndarray, freqs: np.ndarray) -> dict[tuple[str, str | None], np.ndarray]:
    """Row indices (ascending) of each (symbol, frequency), frequency None where absent, in order of
    first appearance."""
    frame = pd.DataFrame({"s": symbols, "f": freqs})
    out: dict[tuple[str, str | None], np.ndarray] = {}
    for (sym, freq), idx in frame.groupby(["s", "f"], dropna=False, sort=False).indices.items():
        out[(str(sym), None if freq is None or freq != freq else str(freq))] = np.asarray(idx)
    return out


def _remember_waiting(memo: WaitingFiles, files: list[Path], todo: pa.Table, ready: np.ndarray,
                      steps_ns: np.ndarray) -> None:
    """Note, for each file read, the earliest step still waiting of each (symbol, frequency)."""
    read: dict[str, dict[tuple[str, str | None], int]] = {
        _file_key(files[k]): {} for k in pc.unique(todo["_file"]).to_pylist()
    }
    wait = pa.array(~ready)
    rows = pa.table({"f": todo["_file"].filter(wait), "s": todo["symbol"].filter(wait),
                     "q": todo["frequency"].filter(wait), "t": pa.array(steps_ns).filter(wait)})
    firsts = rows.group_by(["f", "s", "q"]).aggregate([("t", "min")])  # one row per file and symbol
    for f, sym, freq, t in zip(*(firsts[c].to_pylist() for c in ("f", "s", "q", "t_min"))):
        read[_file_key(files[f])][(sym, freq)] = t
    for key, waits in read.items():
        if waits:
            memo.waits[key] = waits
        else:
            memo.waits.pop(key, None)


def _note_complete(
    ledger: Ledger, files: list[Path], forecasts: pa.Table, waiting: pa.Table | None
) -> None:
    """Note the files read whose every step now has a score (none still ``waiting``)."""
    present = set(forecasts["_file"].to_pylist())
    still = set() if waiting is None else set(waiting["_file"].to_pylist())
    try:
        ledger.mark_complete([files[k] for k in sorted(present - still)])
    except LedgerWriteError as exc:  # only a shortcut for later scorers: never fails the scoring
        log.warning("%s", exc)


def score(ledger: Ledger, store: KlineReader, since: Any = None, now: datetime | None = None,
          require_next_bar: bool = False, waiting: WaitingFiles | None = None) -> ScoreResult:
    """Score every recorded forecast step (of requests at or after ``since``) whose truth the
    store holds and that has no score yet; persist the new scores (one file) and return them.

    ``require_next_bar``: for a store whose newest candle may still be forming (fed from a
    live source), a step's candle counts as its truth only once a later candle is stored.
    ``waiting``: a ``WaitingFiles`` kept from pass to pass (the gateway's), so that files whose
    steps the store cannot answer yet are not read again.

    Scorers are serialized by a file lock in the ledger's folder (``.score.lock``), so two
    gateways never score a step twice. Raises ``LedgerWriteError`` when the scores cannot
    be written (nothing is persisted then, and the steps are scored by a later call)."""
    try:
        ledger.root.mkdir(parents=True, exist_ok=True)
        lock = SymbolLock(ledger.root, LOCK_NAME)
        lock.__enter__()
    except OSError as exc:
        raise LedgerWriteError(
            f"cannot lock ledger {ledger.root} for scoring: {exc.strerror or exc}", exc.errno
        ) from exc
    try:
        return _score_locked(ledger, store, since, now, require_next_bar, waiting)
    finally:
        lock.__exit__(None, None, None)


def _score_locked(ledger: Ledger, store: KlineReader, since: Any, now: datetime | None,
                  require_next_bar: bool, memo: WaitingFiles | None = None) -> ScoreResult:
    skipped: list[tuple[Path, str]] = []
    last_stored = _last_stored(store)  # one metadata read per symbol for the whole pass
    files, forecasts, todo = _unscored(ledger, last_stored, since, memo, skipped)
    if forecasts.num_rows == 0:
        return ScoreResult(empty_scores(), empty_forecasts(), 0, None, skipped)
    if todo.num_rows == 0:
        _note_complete(ledger, files, forecasts, None)
        return ScoreResult(empty_scores(), todo.drop_columns(["_file"]), 0, None, skipped)
    steps_ns = pc.cast(todo["step_time"], pa.int64()).to_numpy()
    truth, origin_close = _truths_of(store, last_stored, todo, steps_ns, require_next_bar)
    ready = np.isfinite(truth[:, FEATURES.index("close")])
    waiting = int((~ready).sum())
    if memo is not None and since is None:
        _remember_waiting(memo, files, todo, ready, steps_ns)
    if not ready.any():
        _note_complete(ledger, files, forecasts, todo.filter(pa.array(~ready)))
        return ScoreResult(
            empty_scores(), todo.slice(0, 0).drop_columns(["_file"]), waiting, None, skipped
        )
    open_rows = todo.filter(pa.array(~ready))
    rows_ready = todo.filter(pa.array(ready)).drop_columns(["_file"])
    truth, origin_close = truth[ready], origin_close[ready]
    scores = _score_table(rows_ready, truth, origin_close, now)
    path = ledger.write_scores(scores)
    _note_complete(ledger, files, forecasts, open_rows)
    scored = rows_ready
    for j, f in enumerate(FEATURES):
        scored = scored.append_column(f"truth_{f}", pa.array(truth[:, j], pa.float64()))
    return ScoreResult(scores, scored, waiting, path, skipped)


def _unscored(
    ledger: Ledger, last_stored: Any, since: Any, memo: WaitingFiles | None,
    skipped: list[tuple[Path, str]],
) -> tuple[list[Path], pa.Table, pa.Table]:
    """The forecast files worth reading (not complete, and due by ``memo``), their rows (of
    requests from ``since`` on) and, of those, the steps with no score yet (``_file``: the index
    of each row's file)."""
    complete = ledger.complete_files()
    files = [f for f in ledger.files(since) if _file_key(f) not in complete]
    if since is None and memo is not None:  # memo remembers whole files: not for a part of them
        present = {_file_key(f) for f in files}
        for gone in [k for k in memo.waits if k not in present]:  # removed (retention) or complete
            del memo.waits[gone]
        files = [f for f in files if memo.due(_file_key(f), last_stored)]
    read = read_files(files, skipped, file_index=True)
    forecasts = empty_forecasts() if read is None else read
    if since is not None:
        forecasts = filter_rows(forecasts, "request_time", utc_ns(since), None, None)
    if forecasts.num_rows == 0:
        return files, forecasts, forecasts
    # a step is scored after its request, so scores of these requests were written from
    # ``since`` on; a day's margin covers writers whose clocks disagree (extra keys are harmless)
    day = (
        None
        if since is None
        else (pd.Timestamp(utc_ns(since), tz="UTC") - pd.Timedelta(days=1)).date()
    )
    done = read_files(partition_files(ledger.scores_root, day), skipped, columns=KEY)
    todo = forecasts
    if done is not None and done.num_rows:
        keys = done.cast(
            pa.schema(
                [
                    pa.field("request_id", pa.string()), pa.field("symbol", pa.string()),
                    pa.field("horizon_step", pa.int32()),
                ]
            )
        )
        todo = forecasts.join(keys, list(KEY), join_type="left anti")
    return files, forecasts, todo.combine_chunks()


def _truths_of(
    store: KlineReader, last_stored: Any, todo: pa.Table, steps_ns: np.ndarray,
    require_next_bar: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's stored truth (N, 6) at its step and the close at its origin (N,), NaN where the
    store has none yet."""
    n = todo.num_rows
    truth = np.full((n, len(FEATURES)), np.nan)  # (N, 6)
    origin_close = np.full(n, np.nan)
    symbols = todo["symbol"].to_numpy(zero_copy_only=False)
    freqs = todo["frequency"].to_numpy(zero_copy_only=False)
    origins_ns = pc.cast(todo["origin"], pa.int64()).to_numpy()
    for (symbol, frequency), idx in _row_groups(symbols, freqs).items():
        last = last_stored(symbol, frequency)
        if last is not None and last < int(steps_ns[idx].min()):
            continue  # the store ends before the earliest of these steps: none has its truth yet
        found = _truths(store, symbol, frequency, steps_ns[idx], origins_ns[idx], require_next_bar)
        if found is not None:
            truth[idx], origin_close[idx] = found
    return truth, origin_close


def _score_table(rows: pa.Table, truth: np.ndarray, origin_close: np.ndarray,
                 now: datetime | None) -> pa.Table:
    """The scores of ``rows`` against their ``truth`` (N, 6), stamped ``now``."""
    recorded_last = _col(rows, "last_close")
    last = np.where(np.isfinite(recorded_last), recorded_last, origin_close)
    values = step_scores(rows, truth[:, FEATURES.index("close")], last)
    scored_at = datetime.now(timezone.utc) if now is None else now
    at_ns = np.full(rows.num_rows, int(scored_at.timestamp() * 1e9), dtype="i8")
    cols: dict[str, Any] = {k: rows[k] for k in KEY}
    cols["request_time"] = rows["request_time"]
    cols["scored_at"] = pa.array(at_ns.astype("datetime64[ns]"), pa.timestamp("ns", tz="UTC"))
    for k in CARRIED[1:]:
        cols[k] = rows[k]
    cols["truth_close"] = pa.array(truth[:, FEATURES.index("close")], pa.float64())
    cols["mean_close"] = rows["mean_close"]
    cols["last_close"] = pa.array(last, pa.float64(), from_pandas=True)
    for k, v in values.items():
        cols[k] = pa.array(v, pa.float64(), from_pandas=True)
    return pa.table(cols)
