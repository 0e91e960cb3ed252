"""Tokenizer fidelity: how much a tokenizer round trip (encode, then decode) moves each feature.

A forecast can be no finer than the tokenizer: every generated candle is decoded from tokens, so a
round-trip error comparable to one bar's move blurs the very thing the model predicts. This module
measures it the way inference sees the data:

* each window (N, L, 6) of raw candles is normalised on its own rows (mean / population std per
  feature, clipped to +-5, as the predictor does over its lookback);
* the tokenizer encodes the normalised window and decodes all its tokens (s1 and s2, the full
  path) in one causal pass;
* the error of a feature is the mean absolute difference between the decoded and the normalised
  input, in **window-std units** (the normalised scale);
* the typical one-step move of a feature is the mean absolute difference between consecutive
  normalised rows, in the same units; ``error / move`` is the fraction of a move the round trip
  loses. The goal for the close of the bundled default is at most 0.15.

A feature that is constant inside a window (no volume: FX) normalises to 0 there and is left out
of that feature's figures; a feature with no usable window gets None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from kronos_core.base.candles import FEATURES, NORM_EPS

DEFAULT_CLIP = 5.0
FIDELITY_GOAL = 0.15  # close round-trip error, as a fraction of the typical one-step move


class RoundTrip(Protocol):
    """What fidelity needs of a tokenizer: ids from normalised candles and back."""

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def decode(self, s1: torch.Tensor, s2: torch.Tensor) -> torch.Tensor: ...


def normalize_windows(
    windows: np.ndarray, clip: float = DEFAULT_CLIP
) -> tuple[np.ndarray, np.ndarray]:
    """(N, L, 6) raw -> (normalised (N, L, 6) float32, varies (N, 6) bool: the feature moves)."""
    x = np.asarray(windows, dtype=np.float32)
    mean = x.mean(axis=1, keepdims=True)  # (N, 1, 6)
    std = x.std(axis=1, keepdims=True)  # (N, 1, 6)
    norm = np.clip((x - mean) / (std + NORM_EPS), -clip, clip).astype(np.float32)
    return norm, std[:, 0, :] > 0


@torch.no_grad()
def round_trip(tokenizer: RoundTrip, norm: np.ndarray, batch: int = 64) -> np.ndarray:
    """Decoded (N, L, 6) of the normalised windows ``norm``, ``batch`` windows at a time."""
    out = []
    for start in range(0, len(norm), batch):
        x = torch.from_numpy(np.ascontiguousarray(norm[start:start + batch]))
        s1, s2 = tokenizer.encode(x)  # (b, L) each
        out.append(tokenizer.decode(s1, s2).float().cpu().numpy())  # (b, L, 6)
    return np.concatenate(out) if out else np.zeros_like(norm)


def fidelity_from_arrays(norm: np.ndarray, decoded: np.ndarray, varies: np.ndarray,
                         features: Sequence[str] = FEATURES) -> dict[str, dict[str, float | None]]:
    """Per feature: ``error_std`` (mean |decoded - norm|), ``move_std`` (mean |norm_t - norm_t-1|),
    ``error_over_move`` and ``windows`` used, over the windows where the feature varies."""
    out: dict[str, dict[str, float | None]] = {}
    for j, name in enumerate(features):
        keep = varies[:, j]
        if not keep.any():
            out[name] = {"error_std": None, "move_std": None, "error_over_move": None, "windows": 0}
            continue
        x, y = norm[keep, :, j], decoded[keep, :, j]  # (n, L)
        error = float(np.abs(y - x).mean())
        move = float(np.abs(np.diff(x, axis=1)).mean())
        out[name] = {
            "error_std": error, "move_std": move,
            "error_over_move": error / move if move > 0 else None, "windows": int(keep.sum()),
        }
    return out


def tokenizer_fidelity(tokenizer: RoundTrip, windows: np.ndarray, clip: float = DEFAULT_CLIP,
                       batch: int = 64) -> dict[str, dict[str, float | None]]:
    """Round-trip error of every feature over ``windows`` (N, L, 6) raw candles, each window
    normalised on its own rows; see the module docstring for the units."""
    windows = np.asarray(windows, dtype=np.float32)
    if windows.ndim != 3 or windows.shape[-1] != len(FEATURES):
        raise ValueError(f"windows must be (N, L, {len(FEATURES)}) candles, got {windows.shape}")
    if windows.shape[1] < 2:
        raise ValueError("windows need at least 2 rows for a one-step move")
    norm, varies = normalize_windows(windows, clip)
    decoded = round_trip(tokenizer, norm, batch)
    return fidelity_from_arrays(norm, decoded, varies)


def fidelity_windows(values: np.ndarray, length: int, count: int,
                     start: int = 0) -> np.ndarray:
    """Up to ``count`` windows of ``length`` rows from ``values`` (T, 6) rows ``start:``, evenly
    spread and counted back from the end: (n, length, 6)."""
    last = len(values) - length
    if last < start:
        return np.zeros((0, length, values.shape[1]), dtype=np.float32)
    ends = np.unique(np.linspace(last, start, num=max(1, count)).round().astype(int))
    return np.stack([values[s:s + length] for s in ends]).astype(np.float32)


def corpus_fidelity(tokenizer: RoundTrip, series: Sequence, eval_starts: Sequence[int], length: int,
                    windows_per_series: int = 8) -> dict[str, dict]:
    """Fidelity per group over held-out windows: for each series (objects with ``values`` (T, 6)
    and ``group`` (market, frequency)), up to ``windows_per_series`` windows of ``length`` rows
    whose last row lies at or after ``eval_starts[i]`` (the series' first evaluation row).
    Returns {"market/frequency": {feature: figures}, ...} plus "all"."""
    by_group: dict[str, list[np.ndarray]] = {}
    for s, first_eval in zip(series, eval_starts):
        w = fidelity_windows(
            s.values, length, windows_per_series, start=max(0, first_eval - length + 1)
        )
        if len(w):
            by_group.setdefault("/".join(s.group), []).append(w)
    out: dict[str, dict] = {}
    everything = []
    for name in sorted(by_group):
        windows = np.concatenate(by_group[name])
        everything.append(windows)
        out[name] = tokenizer_fidelity(tokenizer, windows)
    if everything:
        out["all"] = tokenizer_fidelity(tokenizer, np.concatenate(everything))
    return out
