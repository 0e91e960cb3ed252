"""Move correction: each series' sample paths re-centred and re-spread per horizon step.

A model's raw paths can be off in two ways a desk notices (docs/model-card.md, "Move
correction"): their centre moves too far (a point forecast worse than the last value) and their
spread is too narrow or wide (the mean forecast |return| off the realised). With path returns
``R[s, h] = close[s, h] / last - 1`` over the S paths of one series and their mean ``m[h]``, the
corrected returns are::

    R'[s, h] = lambda[h] * m[h] + kappa[h] * (R[s, h] - m[h])

``lambda`` shrinks the centre toward the last value (0: a random walk's centre, 1: the model's),
``kappa`` scales the spread about it. Each candle's prices (open, high, low, close) are scaled by
``(1 + R') / (1 + R)``, so the candle keeps its shape; volume and amount stay as sampled. A
corrected close never falls below ``MIN_GROSS`` of the last close. Steps beyond those fitted use
the last fitted step's values; a step with lambda 1 and kappa 1 is left exactly as sampled.

The values are fitted on training-period windows by ``kronos tune-moves``
(``kronos_core.eval.moves``) and stored in the model folder's ``kronos.json`` (``moves``), where
``kronos_core.loading`` reads them; the predictor applies them before the price limits
(``kronos_core.base.price_limits``), so the limits hold the corrected paths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PRICES = slice(0, 4)  # open, high, low, close in a candle row (FEATURES order)
CLOSE = 3
MIN_GROSS = 0.01  # a corrected close stays above 1% of the last close
KAPPA_MAX = 10.0  # a spread scaled more than this is a fitting accident, refused at load


@dataclass(frozen=True)
class MoveCorrection:
    """Per-step ``lambda`` (centre shrink, in [0, 1]) and ``kappa`` (spread scale, >= 0), and
    what they were fitted on (``about``: windows, series, where, date, sampling...)."""

    lam: tuple[float, ...]
    kappa: tuple[float, ...]
    about: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    source: str = "kronos.json"  # where they came from (the model's kronos.json)

    def __post_init__(self) -> None:
        lam = tuple(float(v) for v in self.lam)
        kappa = tuple(float(v) for v in self.kappa)
        if not lam or len(lam) != len(kappa):
            raise ValueError(f"moves: lambda and kappa need one value per step, the same number "
                             f"of each (got {len(lam)} and {len(kappa)})")
        if not all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in lam):
            raise ValueError(f"moves: every lambda must be in [0, 1], got {list(lam)}")
        if not all(math.isfinite(v) and 0.0 <= v <= KAPPA_MAX for v in kappa):
            raise ValueError(f"moves: every kappa must be in [0, {KAPPA_MAX:g}], got {list(kappa)}")
        object.__setattr__(self, "lam", lam)
        object.__setattr__(self, "kappa", kappa)

    @classmethod
    def from_manifest(cls, block: Any, source: str) -> MoveCorrection | None:
        """From a ``kronos.json`` ``moves`` block (None: the model has none); a malformed block
        is a ``ValueError`` naming ``source``."""
        if block is None:
            return None
        if not isinstance(block, dict):
            raise ValueError(f"{source}: 'moves' must be an object, got {type(block).__name__}")
        try:
            lam, kappa = block["lambda"], block["kappa"]
            if not isinstance(lam, list) or not isinstance(kappa, list):
                raise ValueError("lambda and kappa must be lists, one value per step")
            about = {k: v for k, v in block.items() if k not in ("lambda", "kappa")}
            return cls(tuple(lam), tuple(kappa), about, source)
        except KeyError as exc:
            raise ValueError(f"{source}: moves: missing {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: moves: {exc}") from exc

    def steps(self, horizon: int) -> tuple[np.ndarray, np.ndarray]:
        """(lambda (H,), kappa (H,)) for ``horizon`` steps; past the fitted steps, the last's."""
        idx = np.minimum(np.arange(horizon), len(self.lam) - 1)  # (H,)
        return np.asarray(self.lam)[idx], np.asarray(self.kappa)[idx]

    def is_identity(self, horizon: int) -> bool:
        """Whether it leaves a forecast of ``horizon`` steps exactly as sampled."""
        lam, kappa = self.steps(horizon)
        return bool(((lam == 1.0) & (kappa == 1.0)).all())

    def as_dict(self) -> dict[str, Any]:
        """What ``/v1/models`` shows: the values per fitted step, how they were fitted, where
        they came from."""
        return {"lambda": list(self.lam), "kappa": list(self.kappa),
                "windows": self.about.get("windows"), "fitted_on": self.about.get("where"),
                "fitted_at": self.about.get("fitted_at"), "source": self.source}

    def report(self, horizon: int, applied: bool) -> dict[str, Any]:
        """What an answer names: whether it was applied and the values of its steps."""
        lam, kappa = self.steps(horizon)
        return {"applied": bool(applied), "lambda": [float(v) for v in lam],
                "kappa": [float(v) for v in kappa], "source": self.source}


def correct_moves(paths: np.ndarray, last: np.ndarray, lam: np.ndarray,
                  kappa: np.ndarray) -> np.ndarray:
    """``paths`` (B, S, H, 6) with each series' close returns from ``last`` (B,) re-centred by
    ``lam`` (H,) and re-spread by ``kappa`` (H,) (module docstring); prices of each candle scaled
    with its close, volume and amount kept. Steps with lambda 1 and kappa 1, and candles whose
    sampled close is not above 0, are left exactly as they were. Returns a new array."""
    lam = np.asarray(lam, dtype=np.float64)  # (H,)
    kappa = np.asarray(kappa, dtype=np.float64)  # (H,)
    active = ~((lam == 1.0) & (kappa == 1.0))  # (H,)
    out = np.array(paths, copy=True)
    if not active.any():
        return out
    base = np.asarray(last, dtype=np.float64)[:, None, None]  # (B, 1, 1)
    gross = out[..., CLOSE].astype(np.float64) / base  # (B, S, H): 1 + R
    ret = gross - 1.0  # (B, S, H)
    centre = ret.mean(axis=1, keepdims=True)  # (B, 1, H)
    new = lam * centre + kappa * (ret - centre)  # (B, S, H)
    new_gross = np.maximum(1.0 + new, MIN_GROSS)  # (B, S, H)
    ok = (gross > 0) & np.isfinite(gross) & (base > 0) & active  # (B, S, H)
    factor = np.where(ok, new_gross / np.where(ok, gross, 1.0), 1.0)  # (B, S, H)
    out[..., PRICES] = (out[..., PRICES] * factor[..., None]).astype(out.dtype)
    return out


def move_report(info: dict[str, Any] | None, horizon: int, applied: bool) -> dict[str, Any] | None:
    """What an answer names (``MoveCorrection.report``) from a model's ``as_dict`` (what
    ``/v1/models`` shows); None when the model has no move correction."""
    if not info:
        return None
    correction = MoveCorrection(tuple(info["lambda"]), tuple(info["kappa"]),
                                source=str(info.get("source") or "kronos.json"))
    return correction.report(horizon, applied)
