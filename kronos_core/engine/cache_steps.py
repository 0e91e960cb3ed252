"""Cache steps: at each decode step, which rows decode from their caches, which are evicted, which
are recomputed.

A pure function of the rows' history lengths, the step, ``max_context`` and the
sliding mode, so the whole schedule is known on the host before the first step
and is unit-tested without a model. A row holds ``length + step`` tokens before
step ``step``; its window is the last ``min(length + step, max_context)``.

* ``exact``: every row is prefilled at step 0 (its first window, positions from
  0). At a later step a row stays cached while its tokens fit ``max_context``;
  once they do not, its window slides, every position changes, so the row is
  evicted from the caches and recomputed over its whole window from then on.
* ``rolling``: every row stays cached; the oldest cached keys are masked out
  once the window slides (approximate).
* ``recompute``: no caches; every row is recomputed at every step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kronos_core.base.options import SLIDING_MODES


@dataclass(frozen=True)
class CacheStep:
    """What one decode step runs. Row ids index the batch; each tuple is sorted."""

    step: int  # 0-based step; the token generated goes to column lmax + step
    prefill: bool  # fill the caches with every row's first window (step 0 of a cached mode)
    evict: tuple[int, ...]  # rows whose caches are dropped before this step (their window slid)
    cached: tuple[int, ...]  # rows run from the caches this step (all rows on the prefill step)
    recompute: tuple[int, ...]  # rows run over their whole window without cache
    trim_window: bool  # rolling mode: cached keys beyond the last max_context are masked

    @property
    def rows(self) -> tuple[int, ...]:
        """Every row this step produces a token for (each exactly once)."""
        return tuple(sorted(self.cached + self.recompute))


def _check(lengths: Sequence[int], max_context: int, mode: str) -> None:
    if mode not in SLIDING_MODES:
        raise ValueError(f"sliding must be one of {SLIDING_MODES}, got {mode!r}")
    if max_context < 1:
        raise ValueError(f"max_context must be >= 1, got {max_context}")
    if not lengths or min(lengths) < 1:
        raise ValueError(f"every row needs at least one history token, got lengths {list(lengths)}")


def _cached_rows(lengths: Sequence[int], step: int, max_context: int, mode: str) -> tuple[int, ...]:
    """Rows holding valid caches at ``step`` (before eviction is applied they held them at step -
    1)."""
    if mode == "recompute":
        return ()
    if mode == "rolling" or step == 0:
        return tuple(range(len(lengths)))
    return tuple(i for i, n in enumerate(lengths) if n + step <= max_context)


def cache_step(
    lengths: Sequence[int], step: int, max_context: int, mode: str = "exact"
) -> CacheStep:
    """What decode step ``step`` runs for rows with history ``lengths`` (real tokens, >= 1)."""
    lengths = [int(n) for n in lengths]
    _check(lengths, max_context, mode)
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    cached = _cached_rows(lengths, step, max_context, mode)
    before = _cached_rows(lengths, step - 1, max_context, mode) if step > 0 else cached
    kept = set(cached)
    evict = tuple(i for i in before if i not in kept)
    recompute = tuple(i for i in range(len(lengths)) if i not in kept)
    return CacheStep(
        step=step,
        prefill=step == 0 and mode != "recompute",
        evict=evict,
        cached=cached,
        recompute=recompute,
        trim_window=mode == "rolling",
    )


def cache_steps(
    lengths: Sequence[int], horizon: int, max_context: int, mode: str = "exact"
) -> list[CacheStep]:
    """The cache steps of all ``horizon`` steps, made on the host before the first one."""
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    return [cache_step(lengths, step, max_context, mode) for step in range(horizon)]
