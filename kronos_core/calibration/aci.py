"""Adaptive conformal inference (ACI) on top of the CQR conformity scores.

Method: Gibbs & Candès (2021), "Adaptive Conformal Inference Under Distribution
Shift", NeurIPS. Split conformal (CQR) assumes the calibration windows and the new
ones are exchangeable; market volatility shifts, and then its coverage drifts. ACI
walks forward through the windows in time and, for every central level ``c``
(nominal miscoverage ``a = 1 - c``), horizon step and feature separately, keeps an
effective miscoverage ``a_t``:

    correction_t = the ceil((W + 1)(1 - a_t))-th smallest of the W most recent known scores
    a_{t+1}      = a_t + gamma * (a - err_t),   err_t = 1 if the truth left the interval issued at t

(Gibbs & Candès eq. 2, with the quantile re-estimated on a trailing window of scores
as in their experiments). Their Proposition 4.1 bounds the long-run miscoverage:
``|mean(err) - a| <= (max(a_1, 1 - a_1) + gamma) / (gamma T)`` for any sequence.

**Delayed feedback, no look-ahead.** A window's error and score are known only once
its whole truth has been observed: window ``j`` updates the state before window ``i``
is issued only if ``resolved[j] <= issued[i]`` (the time of j's last truth candle is at
or before the last context candle of i). Windows still open wait in a queue.

Deviations (stated so the guarantee is read correctly): ``a_t`` is kept in
``[-gamma, 1 + gamma]`` (the range exact ACI stays in, Gibbs & Candès Lemma 4.1) and
the correction is clipped to the trailing scores' range, so intervals stay finite
(exact ACI would issue an infinite interval where ``a_t`` <= 1/(W + 1)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# step sizes tried by the nested selection (0.005: Gibbs & Candès)
GAMMAS = (0.005, 0.01, 0.02, 0.05)
CITATION = "Gibbs, Candès (2021), Adaptive Conformal Inference Under Distribution Shift, NeurIPS"


def conformal_corrections(scores: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Elementwise ``ceil((W + 1) beta)``-th smallest of ``scores`` (W, ...) along axis 0 for
    levels ``beta`` (...), the rank clipped to [1, W] so the result is always a finite score."""
    s = np.sort(np.asarray(scores, dtype=np.float64), axis=0)  # (W, ...)
    w = s.shape[0]
    beta = np.broadcast_to(np.asarray(beta, dtype=np.float64), s.shape[1:])
    k = np.ceil((w + 1) * beta - 1e-9).astype(np.int64)  # (...)
    k = np.clip(k, 1, w)
    return np.take_along_axis(s, (k - 1)[None], axis=0)[0]


@dataclass
class ACIState:
    """The walk's state: step size, nominal and effective miscoverage, trailing scores."""

    gamma: float
    nominal: np.ndarray  # (C,) nominal miscoverage 1 - c per central level
    alpha: np.ndarray  # (C, H, F) effective miscoverage a_t
    scores: np.ndarray  # (W, C, H, F) the W most recent known scores, oldest first

    @property
    def window(self) -> int:
        return int(self.scores.shape[0])

    def correction(self) -> np.ndarray:
        """(C, H, F) the correction ACI issues now."""
        return conformal_corrections(self.scores, 1.0 - self.alpha)

    def update(self, score: np.ndarray, issued_correction: np.ndarray) -> None:
        """One window's truth became known: its score (C, H, F) and the correction it was issued."""
        err = (score > issued_correction).astype(np.float64)  # (C, H, F) truth outside the interval
        a = self.nominal[:, None, None]
        self.alpha = np.clip(self.alpha + self.gamma * (a - err), -self.gamma, 1 + self.gamma)
        self.scores = np.concatenate([self.scores[1:], score[None]], axis=0)

    def copy(self) -> ACIState:
        return ACIState(self.gamma, self.nominal.copy(), self.alpha.copy(), self.scores.copy())

    def to_dict(self) -> dict:
        return {"gamma": self.gamma, "window": self.window, "alpha": self.alpha.tolist(),
                "scores": self.scores.tolist()}

    @classmethod
    def from_dict(cls, d: dict, levels) -> ACIState:
        nominal = 1.0 - np.asarray(levels, dtype=np.float64)
        return cls(float(d["gamma"]), nominal, np.asarray(d["alpha"], dtype=np.float64),
                   np.asarray(d["scores"], dtype=np.float64))


def initial_state(scores: np.ndarray, levels, gamma: float) -> ACIState:
    """Start from known scores (W, C, H, F) with ``a_1`` = the nominal miscoverage."""
    nominal = 1.0 - np.asarray(levels, dtype=np.float64)  # (C,)
    alpha = np.broadcast_to(nominal[:, None, None], scores.shape[1:]).astype(np.float64).copy()
    return ACIState(float(gamma), nominal, alpha, np.asarray(scores, dtype=np.float64).copy())


def walk(state: ACIState, scores: np.ndarray, issued: np.ndarray, resolved: np.ndarray,
         flush: bool = True) -> tuple[np.ndarray, ACIState]:
    """Walk forward through N windows (ascending ``issued``): the correction (N, C, H, F) each
    window is issued, from the state updated with every earlier window whose truth is known.

    scores: (N, C, H, F) the windows' conformity scores (read only once known);
    issued: (N,) time of each window's last context candle; resolved: (N,) time of its last
    truth candle (any comparable numbers, e.g. int64 nanoseconds or row numbers).
    flush: after the last window, also take in the windows still pending (the state once
    every truth is known). Returns the corrections and the new state (``state`` is untouched).
    """
    issued, resolved = np.asarray(issued), np.asarray(resolved)
    if len(issued) > 1 and (np.diff(issued) < 0).any():
        raise ValueError("ACI walks forward: windows must be in ascending order of issue time")
    st = state.copy()
    out = np.empty(scores.shape, dtype=np.float64)  # (N, C, H, F)
    pending: list[int] = []
    for i in range(len(issued)):
        ready = sorted(
            (j for j in pending if resolved[j] <= issued[i]), key=lambda j: (resolved[j], j)
        )
        for j in ready:
            st.update(scores[j], out[j])
        pending = [j for j in pending if j not in ready]
        out[i] = st.correction()
        pending.append(i)
    if flush:
        for j in sorted(pending, key=lambda j: (resolved[j], j)):
            st.update(scores[j], out[j])
    return out, st


def coverage_gap(scores: np.ndarray, corrections: np.ndarray, levels, feature: int) -> float:
    """Mean over levels and steps of |coverage - nominal| of one feature's issued intervals."""
    cov = (scores[..., feature] <= corrections[..., feature]).mean(axis=0)  # (C, H)
    return float(np.abs(cov - np.asarray(levels, dtype=np.float64)[:, None]).mean())


def split_point(issued: np.ndarray, resolved: np.ndarray, w: int) -> int:
    """First window at or after ``w`` issued once all of the first ``w`` windows' truths are known
    (the windows in between are left out: their issue would precede some initial score)."""
    known = resolved[:w].max()
    later = np.flatnonzero(np.asarray(issued)[w:] >= known)
    return w + int(later[0]) if len(later) else len(issued)


def fit_state(
    scores: np.ndarray, issued: np.ndarray, resolved: np.ndarray, levels, gamma: float
) -> ACIState:
    """The state after walking calibration windows (time order): the first half's scores start it,
    the rest is walked with ``gamma`` and taken in (the state once every calibration truth is
    known)."""
    w = len(scores) // 2
    start = split_point(issued, resolved, w)
    _, st = walk(
        initial_state(scores[:w], levels, gamma), scores[start:], issued[start:], resolved[start:]
    )
    return st


def choose_gamma(scores: np.ndarray, issued: np.ndarray, resolved: np.ndarray, levels, feature: int,
                 gammas=GAMMAS) -> tuple[float, dict]:
    """Nested selection inside the calibration windows (time order): start from the first half's
    scores, walk the second half (from ``split_point``) with each gamma, keep the one whose close
    coverage is nearest nominal (ties: the smaller gamma). Never sees data after the calibration
    windows. Returns the gamma and the gap per gamma."""
    n = len(scores)
    w = n // 2
    need = max(math.ceil(c / (1 - c)) for c in levels)
    if w < need or n - w < 1:
        raise ValueError(
            f"ACI needs at least {2 * need} calibration windows for level {max(levels):g} "
            f"(got {n}); raise --windows"
        )
    start = split_point(issued, resolved, w)
    if start >= n:
        raise ValueError(
            "ACI: no calibration window is issued after the first half's truths are known"
        )
    gaps = {}
    for g in gammas:
        corr, _ = walk(
            initial_state(scores[:w], levels, g), scores[start:], issued[start:], resolved[start:],
            flush=False,
        )
        gaps[g] = coverage_gap(scores[start:], corr, levels, feature)
    best = min(gammas, key=lambda g: (round(gaps[g], 12), g))
    return best, gaps
