"""Ragged batch assembly: one row per (series, sample path), left-padded.

Left padding keeps every row's newest token in the same column, so the decode
loop appends all rows at one shared cache slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class EngineBatch:
    """Normalized model inputs for the generation loop."""

    x: torch.Tensor  # (N, Lmax, 6) float32 normalized candles, left-padded with zeros
    x_stamp: torch.Tensor  # (N, Lmax, 5) time features of the history, left-padded
    y_stamp: torch.Tensor  # (N, H, 5) time features of the future timestamps
    lengths: torch.Tensor  # (N,) int64 real history length of each row
    # (N,) uint64 seeds for batch-invariant sampling; None = global RNG
    row_keys: np.ndarray | None = None
    # rows come in runs of ``paths`` copies of one series (row = series * paths + path): the
    # generation tokenizes and prefills each series once and spreads it over its paths
    paths: int = 1

    def __post_init__(self) -> None:
        if self.paths < 1 or self.x.shape[0] % self.paths:
            raise ValueError(f"{self.x.shape[0]} rows are not runs of {self.paths} paths")

    @property
    def rows(self) -> int:
        return self.x.shape[0]

    @property
    def horizon(self) -> int:
        return self.y_stamp.shape[1]

    @property
    def pad(self) -> torch.Tensor:
        """(N,) padding columns at the start of each row."""
        return self.x.shape[1] - self.lengths


def assemble(
    x_norm: Sequence[np.ndarray],
    x_stamps: Sequence[np.ndarray],
    y_stamps: Sequence[np.ndarray],
    sample_count: int = 1,
    row_keys: np.ndarray | None = None,
    device: torch.device | str = "cpu",
) -> EngineBatch:
    """Stack ragged series into an ``EngineBatch``, repeating each ``sample_count`` times.

    x_norm[i] (L_i, 6), x_stamps[i] (L_i, 5), y_stamps[i] (H, 5); rows are
    series-major: row = series * sample_count + path.
    """
    if not (len(x_norm) == len(x_stamps) == len(y_stamps)) or not x_norm:
        raise ValueError(
            "need the same, non-zero number of series, history stamps and future stamps"
        )
    lengths = np.array([len(a) for a in x_norm])
    horizons = {len(a) for a in y_stamps}
    if len(horizons) != 1:
        raise ValueError(f"all series need the same horizon, got {sorted(horizons)}")
    b, lmax, h = len(x_norm), int(lengths.max()), horizons.pop()
    x = np.zeros((b, lmax, 6), dtype=np.float32)
    xs = np.zeros((b, lmax, 5), dtype=np.float32)
    for i, (v, s) in enumerate(zip(x_norm, x_stamps)):
        x[i, lmax - len(v) :] = v
        xs[i, lmax - len(s) :] = s
    ys = np.stack([np.asarray(a, dtype=np.float32) for a in y_stamps]).reshape(b, h, 5)

    def rows(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.repeat(a, sample_count, axis=0)).to(device)

    return EngineBatch(
        x=rows(x), x_stamp=rows(xs), y_stamp=rows(ys), lengths=rows(lengths.astype(np.int64)),
        row_keys=row_keys, paths=int(sample_count),
    )
