"""Training data: series from files or the Arrow store, time-split windows, a resumable sampler.

* ``load_series`` reads every series (CSV/Parquet files, or store symbols) as
  float32 candles (n, 6) plus time features (n, 5).
* ``split_windows`` cuts each series by time: training windows end before the
  validation part starts, so no validation candle is ever seen in training.
* ``WindowDataset`` normalises each window on its lookback part only (the future
  part never leaks into the statistics) and clips like inference does.
* ``StepBatchSampler`` yields, for each optimisation step, this rank's share of
  the step's batch, from a seeded per-epoch permutation; its position
  ``(epoch, batch)`` is saved in checkpoints so a resumed run sees the same data.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from kronos_core.base.candles import NORM_EPS, CandleError, candle_array, time_features

if TYPE_CHECKING:  # the config is pydantic; scripts/gpu_train.py passes a plain object instead
    import pandas as pd

    from kronos_core.train.config import DataConfig

log = logging.getLogger(__name__)


@dataclass
class Series:
    name: str
    values: np.ndarray  # (n, 6) float32 candles
    stamps: np.ndarray  # (n, 5) float32 [minute, hour, weekday, day, month]
    timestamps: pd.DatetimeIndex | None = None  # (n,) the rows' times (for forecasting checks)


def _series_from_frame(name: str, df, timestamp_column: str) -> Series:
    import pandas as pd

    if timestamp_column not in df.columns:
        raise CandleError(f"{name}: no {timestamp_column!r} column (columns: {list(df.columns)}); "
                          "set data.timestamp_column")
    stamps = pd.DatetimeIndex(pd.to_datetime(df[timestamp_column]))
    order = np.argsort(stamps.asi8, kind="stable")
    if not (order == np.arange(len(order))).all():
        log.warning("%s: rows not in time order; sorting them", name)
        df, stamps = df.iloc[order], stamps[order]
    values = np.array(candle_array(df), dtype=np.float32)  # own, writable copy
    return Series(name, values, time_features(stamps), stamps)


def _series_from_file(path: Path, cfg: DataConfig) -> Series:
    """One file through the reader every command uses (``kronos import``, ``forecast``, ``eval``):
    any-case names (``Date``, ``Open``), ``cfg.columns`` mapped, validation reported by row,
    ``cfg.repairs`` applied (rows sorted by time unless told otherwise)."""
    from kronos_core.data.reader import ReadOptions, read_candles
    from kronos_core.data.validate import Repairs

    # None: auto-detect
    column = None if cfg.timestamp_column == "timestamps" else cfg.timestamp_column
    options = ReadOptions(time_column=column, column_map=dict(cfg.columns),
                          repairs=Repairs(**{name: True for name in cfg.repairs}))
    frame, _tz, _report = read_candles(path, options)
    return _series_from_frame(str(path), frame, "timestamps")


def load_series(cfg: DataConfig) -> list[Series]:
    """All series named by ``cfg`` (files, and/or store symbols), oldest row first."""
    from kronos_core.data.reader import CSV_SUFFIXES, PARQUET_SUFFIXES

    out: list[Series] = []
    for path in cfg.paths:
        p = Path(path)
        tables = CSV_SUFFIXES + PARQUET_SUFFIXES
        files = (sorted(f for f in p.iterdir() if f.name.lower().endswith(tables))
                 if p.is_dir() else [p])
        for f in files:
            if not f.exists():
                raise FileNotFoundError(f"training data file {f} not found")
            out.append(_series_from_file(f, cfg))
    if cfg.corpus:
        out.extend(corpus_series(cfg))
    if cfg.store:
        from kronos_core.data.store import KlineStore

        store = KlineStore(cfg.store, cfg.frequency)
        symbols = cfg.symbols or store.symbols(cfg.frequency)
        for sym in symbols:
            out.append(_series_from_frame(f"{cfg.store}:{sym}", store.read(sym), "timestamps"))
    if not out:
        raise ValueError("no training data: give data.paths (CSV/Parquet files) or data.store")
    return out


def corpus_series(cfg: DataConfig) -> list[Series]:
    """The training rows of a corpus (``kronos_core.data.corpus``): only ``split == train``
    instruments, only rows both hold-out rules allow, as one Series per contiguous run that
    holds at least one window, named ``SYMBOL[first..last]``. A hold-out instrument or an
    evaluation row is never read into one (tests/train/test_corpus_holdout.py).

    ``cfg`` needs ``corpus``, ``markets``, ``frequencies`` and ``window`` only."""
    from kronos_core.data.corpus import TRAIN, Corpus, CorpusFilter, training_segments

    assert cfg.corpus is not None
    corpus = Corpus(cfg.corpus)
    flt = CorpusFilter(split=TRAIN, markets=tuple(cfg.markets) if cfg.markets else None,
                       frequencies=tuple(cfg.frequencies) if cfg.frequencies else None)
    series = corpus.load(flt)
    out = []
    for s, start, end in training_segments(corpus, series, cfg.window):
        name = f"{s.symbol}[{s.timestamps[start]}..{s.timestamps[end - 1]}]"
        stamps = s.timestamps[start:end]
        out.append(Series(name, s.values[start:end].copy(), time_features(stamps), stamps))
    log.info("corpus %s: %d training segments of %d instruments", cfg.corpus, len(out), len(series))
    return out


def split_windows(series: list[Series],
                  cfg: DataConfig) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(series index, start) of training and validation windows.

    Per series the last ``val_fraction`` of rows is validation: every training
    window ends at or before the split row and every validation window starts at
    or after it. Windows step by ``cfg.stride``.
    """
    width, train, val = cfg.window, [], []
    cap = cfg.max_windows_per_series
    for i, s in enumerate(series):
        n = len(s.values)
        split = int(round(n * (1.0 - cfg.val_fraction)))
        stride = cfg.stride
        if cap is not None and (split - width) // stride + 1 > cap:
            stride = max(stride, (split - width) // cap + 1)
        train += [(i, start) for start in range(0, split - width + 1, stride)]
        if cfg.val_fraction > 0:
            val_stride = (stride if cap is None
                          else max(stride, (n - split - width) // max(cap // 4, 1) + 1))
            val += [(i, start) for start in range(split, n - width + 1, val_stride)]
        if split < width:
            log.warning("%s: %d training rows, fewer than one window of %d; skipped",
                        s.name, split, width)
    if not train:
        names = ", ".join(s.name for s in series)
        raise ValueError(f"no training window of {width} rows fits in {names}; "
                         "lower data.lookback/horizon")
    return train, val


def normalize_window(window: np.ndarray, lookback: int, clip: float) -> np.ndarray:
    """window (W, 6) -> normalised (W, 6) with the mean/std of its first ``lookback`` rows only."""
    past = window[:lookback]  # (lookback, 6)
    mean, std = past.mean(axis=0), past.std(axis=0)
    return np.clip((window - mean) / (std + NORM_EPS), -clip, clip).astype(np.float32)


def reflect_window(x: np.ndarray) -> np.ndarray:
    """The price reflection of a normalised window (W, 6): every price mirrored about a level
    (the last close, say), so a rise becomes an equal fall; high and low swap places; volume and
    amount stay. Mirroring raw prices about any level shifts the lookback mean by the same
    mirror and keeps the std, so in normalised units it is a sign flip of the four prices."""
    out = x.copy()
    out[:, :4] = -x[:, :4]  # (W, 4) open, high, low, close
    out[:, 1], out[:, 2] = -x[:, 2], -x[:, 1]  # the mirrored low is the new high
    return out


class WindowDataset(Dataset):
    """Windows of ``lookback + horizon`` rows: {"x": (W, 6) normalised, "stamp": (W, 5)}.

    With ``reflect`` the dataset is twice as long: index ``i + len(index)`` is window ``i``'s
    price reflection (``reflect_window``), so each epoch sees every window both ways and a
    resumed run's sampler positions still name the same rows."""

    def __init__(self, series: list[Series], index: list[tuple[int, int]], cfg: DataConfig,
                 reflect: bool = False):
        self.series, self.index, self.cfg, self.reflect = series, index, cfg, reflect

    def __len__(self) -> int:
        return len(self.index) * (2 if self.reflect else 1)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        mirrored, i = divmod(i, len(self.index))
        sid, start = self.index[i]
        s, end = self.series[sid], start + self.cfg.window
        x = normalize_window(s.values[start:end], self.cfg.lookback, self.cfg.clip)
        if mirrored:
            x = reflect_window(x)
        return {"x": torch.from_numpy(x), "stamp": torch.from_numpy(s.stamps[start:end].copy())}


class StepBatchSampler(Sampler):
    """Yields one list of indices per optimisation step: this rank's share of the step's batch.

    The step batch of ``batch_size`` rows is cut into ``world`` equal parts; rank
    r gets part r. The order comes from ``torch.randperm`` seeded with
    ``seed + epoch`` (``shuffle``), so it is the same for every world size: two
    ranks with half the batch see exactly the rows one rank with the whole batch sees.
    Set ``epoch`` and ``position`` (the first step batch to yield) before iterating.
    """

    def __init__(self, n: int, batch_size: int, *, seed: int = 0, rank: int = 0, world: int = 1,
                 shuffle: bool = True, drop_last: bool = True):
        if batch_size % world:
            raise ValueError(f"batch size {batch_size} is not divisible by the {world} processes")
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.rank, self.world, self.shuffle, self.drop_last = rank, world, shuffle, drop_last
        self.epoch, self.position = 0, 0  # position: next step batch within the epoch

    def batches_per_epoch(self) -> int:
        full, rest = divmod(self.n, self.batch_size)
        return full if (self.drop_last or rest == 0) else full + 1

    def _order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.n))
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(self.n, generator=gen).tolist()

    def __iter__(self):
        """Step batches of ``epoch`` from ``position`` on; the caller tracks what it consumed
        (a DataLoader with workers reads ahead) and sets both before the next epoch."""
        order, share = self._order(), self.batch_size // self.world
        for step in range(self.position, self.batches_per_epoch()):
            rows = order[step * self.batch_size:(step + 1) * self.batch_size]
            # last partial batch (drop_last False): split as evenly as possible
            if len(rows) < self.batch_size:
                yield rows[self.rank::self.world]
            else:
                yield rows[self.rank * share:(self.rank + 1) * share]

    def __len__(self) -> int:
        return self.batches_per_epoch() - self.position


def make_loader(dataset: Dataset, sampler: Sampler, num_workers: int,
                generator: torch.Generator | None = None) -> DataLoader:
    """A DataLoader over step batches; ``num_workers`` > 0 loads in worker processes.

    Its own ``generator`` keeps the loader from drawing on the global RNG, so a
    resumed run's dropout masks match an uninterrupted run's.
    """
    return DataLoader(dataset, batch_sampler=sampler, num_workers=num_workers,
                      generator=generator or torch.Generator().manual_seed(0),
                      pin_memory=torch.cuda.is_available())
