"""Conformalized quantile regression (CQR) of the forecast quantiles, per horizon step and level.

Method: Romano, Patterson & Candès (2019), "Conformalized Quantile Regression",
NeurIPS. For a central interval of nominal level ``c`` (lower/upper quantile
levels ``(1 - c) / 2`` and ``(1 + c) / 2``, read off the sample paths), each
calibration window gives a conformity score

    E = max(lo - y, y - hi)

and the interval is widened (or narrowed, E can be negative) by the
``ceil((n + 1) c)``-th smallest of the n scores. With exchangeable windows the
corrected interval covers a new truth with probability >= c. Here everything is
done on log prices, so a correction multiplies the bands and carries over
between price levels, and separately for every horizon step and every level.

``method="cqr-r"`` divides each score by the interval's log width, so the
correction scales with the model's own uncertainty (the width-scaled variant
compared in Sesia & Candès 2020, "A comparison of some conformal quantile
regression methods", Stat 9(1)). It transfers better between series with
different volatility; plain ``cqr`` is the default.

Both assume the calibration windows and the new ones are exchangeable, which a
shift in volatility breaks. Two remedies, both chosen with the calibration windows
only (split in time: first half, then the later windows), never with held-out data:

* ``method="select"``: fit ``cqr`` and ``cqr-r`` on the first half, keep the one whose
  coverage on the later calibration windows is nearer nominal (mean |observed - nominal|
  over levels and steps, close; ties: ``cqr``), refit it on all the windows. The file
  then says ``cqr`` or ``cqr-r`` and records the selection in ``info``.
* ``method="aci"``: adaptive conformal inference (Gibbs & Candès 2021, see
  ``kronos_core.eval.aci``) on the ``cqr`` scores, its step size ``gamma`` chosen by the
  same nested split; the file holds the state after walking every calibration window
  (effective levels and trailing scores) and its correction. Applied from a file the
  correction is static; it adapts when the walk is continued (``Calibration.walk``, used
  by ``kronos calibrate --holdout`` on the held-out windows) or the file is refitted.

A calibration is tied to the model it was fitted for (its identity's SHA-256);
applying it to another model raises ``CalibrationMismatch``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kronos_core.candles import FEATURES
from kronos_core.eval import aci

METHODS = ("cqr", "cqr-r", "select", "aci")
PRICE_FEATURES = ("open", "high", "low", "close")
FORMAT = "kronos-calibration/1"
CITATION = "Romano, Patterson, Candès (2019), Conformalized Quantile Regression, NeurIPS"


class CalibrationError(ValueError):
    """A calibration file that cannot be used (bad file, levels or horizon out of its range)."""


class CalibrationMismatch(CalibrationError):
    """A calibration fitted for another model than the one asked to apply it."""


def _log(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if (x <= 0).any():
        raise CalibrationError("calibration works on log prices: forecasts and truths must be positive")
    return np.log(x)


def conformal_quantile(scores: np.ndarray, level: float) -> float:
    """The ceil((n + 1) level)-th smallest score (the CQR correction)."""
    s = np.sort(np.asarray(scores, dtype=np.float64))
    k = math.ceil((len(s) + 1) * level)
    if k > len(s):
        need = math.ceil(level / (1 - level))
        raise CalibrationError(f"{len(s)} calibration windows are too few for a {level:g} interval; "
                               f"need at least {need} (raise --windows)")
    return float(s[k - 1])


def _scores(lo, hi, y, method):
    lo, hi, y = _log(lo), _log(hi), _log(y)
    e = np.maximum(lo - y, y - hi)
    return e / np.maximum(hi - lo, 1e-12) if method == "cqr-r" else e


def conformity_scores(samples: np.ndarray, truth: np.ndarray, levels: Sequence[float], fidx: Sequence[int],
                      method: str = "cqr") -> np.ndarray:
    """Scores (N, C, H, F) of windows' sample paths (N, S, H, 6) and truths (N, H, 6), per
    central level and the feature columns ``fidx``."""
    out = []
    for c in levels:
        q = np.quantile(samples[..., fidx], [(1 - c) / 2, (1 + c) / 2], axis=1)  # (2, N, H, F)
        out.append(_scores(q[0], q[1], truth[..., fidx], method))  # (N, H, F)
    return np.stack(out, axis=1)


def _static_corrections(scores: np.ndarray, levels) -> np.ndarray:
    """(C, H, F) CQR corrections of scores (N, C, H, F)."""
    corr = np.zeros(scores.shape[1:])
    for ci, c in enumerate(levels):
        for h in range(scores.shape[2]):
            for j in range(scores.shape[3]):
                corr[ci, h, j] = conformal_quantile(scores[:, ci, h, j], c)
    return corr


def _time_order(issued, resolved, n: int, method: str):
    if issued is None or resolved is None:
        raise CalibrationError(f"method {method!r} needs the windows' issue and resolution times")
    issued, resolved = np.asarray(issued), np.asarray(resolved)
    if len(issued) != n or len(resolved) != n:
        raise CalibrationError(f"{n} windows but {len(issued)} issue and {len(resolved)} resolution times")
    return np.argsort(issued, kind="stable"), issued, resolved


def select_method(samples, truth, levels, fidx, issued, resolved) -> tuple[str, dict]:
    """``cqr`` or ``cqr-r``: fitted on the first half of the (time-ordered) windows, the one whose
    close coverage on the later ones is nearer nominal (ties: cqr). Returns it and the gaps."""
    n = len(truth)
    start = aci.split_point(issued, resolved, n // 2)
    if start >= n:
        raise CalibrationError("select: no calibration window is issued after the first half's truths are known")
    close = fidx.index(FEATURES.index("close")) if FEATURES.index("close") in fidx else 0
    gaps = {}
    for m in ("cqr", "cqr-r"):
        corr = _static_corrections(conformity_scores(samples[: n // 2], truth[: n // 2], levels, fidx, m), levels)
        later = conformity_scores(samples[start:], truth[start:], levels, fidx, m)  # (N', C, H, F)
        gaps[m] = aci.coverage_gap(later, np.broadcast_to(corr, later.shape), levels, close)
    best = min(("cqr", "cqr-r"), key=lambda m: round(gaps[m], 12))  # min keeps the first (cqr) on ties
    return best, gaps


@dataclass(eq=False)  # compared by identity, so ForecastOptions holding one stay hashable
class Calibration:
    """Corrections ``(C, H, F)``: per central level, horizon step and feature (log units,
    or interval widths for ``cqr-r``)."""

    method: str
    model: dict  # identity of the model fitted for (ModelIdentity.as_dict())
    levels: tuple[float, ...]  # central levels, ascending, e.g. (0.5, 0.8, 0.9)
    features: tuple[str, ...]  # calibrated features (price columns)
    corrections: np.ndarray  # (C, H, F)
    info: dict = field(default_factory=dict)  # windows, lookback, sample_count, data ...
    state: aci.ACIState | None = None  # method "aci": the walk's state after the calibration windows

    @property
    def horizon(self) -> int:
        return int(self.corrections.shape[1])

    # ---- fit / file ---------------------------------------------------------------------
    @classmethod
    def fit(cls, samples: np.ndarray, truth: np.ndarray, levels: Sequence[float], model: dict,
            method: str = "cqr", features: Sequence[str] = PRICE_FEATURES, info: dict | None = None,
            issued=None, resolved=None) -> Calibration:
        """Fit on sample paths (N, S, H, 6) and truths (N, H, 6) of calibration windows.

        ``select`` and ``aci`` also need each window's issue time (its last context candle)
        and resolution time (its last truth candle), (N,) comparable numbers."""
        if method not in METHODS:
            raise CalibrationError(f"method must be one of {METHODS}, got {method!r}")
        levels = tuple(sorted(float(c) for c in levels))
        fidx = [FEATURES.index(f) for f in features]
        info = dict(info or {})
        state = None
        if method in ("select", "aci"):
            order, issued, resolved = _time_order(issued, resolved, len(truth), method)
            samples, truth, issued, resolved = samples[order], truth[order], issued[order], resolved[order]
        if method == "select":
            method, gaps = select_method(samples, truth, levels, fidx, issued, resolved)
            info["selection"] = {"chosen": method, "validation_gap": gaps,
                                 "rule": "nearest nominal on the later half of the calibration windows"}
        scores = conformity_scores(samples, truth, levels, fidx, "cqr" if method == "aci" else method)
        if method == "aci":
            close = fidx.index(FEATURES.index("close")) if FEATURES.index("close") in fidx else 0
            try:
                gamma, gaps = aci.choose_gamma(scores, issued, resolved, levels, close)
            except ValueError as exc:
                raise CalibrationError(str(exc)) from exc
            state = aci.fit_state(scores, issued, resolved, levels, gamma)
            info["aci"] = {"gamma": gamma, "validation_gap": {f"{g:g}": v for g, v in gaps.items()},
                           "citation": aci.CITATION, "window": state.window}
            corr = state.correction()
        else:
            corr = _static_corrections(scores, levels)
        return cls(method, dict(model), levels, tuple(features), corr, info, state)

    def walk(self, samples: np.ndarray, truth: np.ndarray, issued, resolved) -> np.ndarray:
        """ACI continued through new windows (time order): the correction (N, C, H, F) issued to
        each, the state updated only with windows whose truth ended by its issue time.
        For ``cqr``/``cqr-r`` files: the static correction for every window."""
        fidx = [FEATURES.index(f) for f in self.features]
        if self.state is None:
            return np.broadcast_to(self.corrections, (len(truth), *self.corrections.shape)).copy()
        scores = conformity_scores(samples, truth, self.levels, fidx, "cqr")
        corr, _ = aci.walk(self.state, scores, issued, resolved, flush=False)
        return corr

    def scores(self, samples: np.ndarray, truth: np.ndarray) -> np.ndarray:
        """This method's conformity scores (N, C, H, F) of windows (a truth is inside the corrected
        interval of level c exactly when its score <= the correction)."""
        fidx = [FEATURES.index(f) for f in self.features]
        return conformity_scores(samples, truth, self.levels, fidx, "cqr" if self.method == "aci" else self.method)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT, "method": self.method,
            "citation": CITATION + ("; " + aci.CITATION if self.method == "aci" else ""), "model": self.model,
            "levels": list(self.levels), "features": list(self.features), "horizon": self.horizon,
            "corrections": {f: {f"{c:g}": self.corrections[ci, :, j].tolist() for ci, c in enumerate(self.levels)}
                            for j, f in enumerate(self.features)},
            "info": self.info,
            **({"aci_state": self.state.to_dict()} if self.state is not None else {}),
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        path = Path(path)
        try:
            d = json.loads(path.read_text())
            if d.get("format") != FORMAT:
                raise CalibrationError(f"{path}: not a calibration file (format {d.get('format')!r}, want {FORMAT})")
            levels = tuple(float(c) for c in d["levels"])
            feats = tuple(d["features"])
            corr = np.array([[d["corrections"][f][f"{c:g}"] for f in feats] for c in levels])  # (C, F, H)
            state = aci.ACIState.from_dict(d["aci_state"], levels) if "aci_state" in d else None
            return cls(d["method"], d["model"], levels, feats, corr.transpose(0, 2, 1), d.get("info", {}), state)
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, CalibrationError):
                raise
            raise CalibrationError(f"cannot read calibration {path}: {exc}") from exc

    # ---- apply ---------------------------------------------------------------------------
    def check_model(self, identity) -> None:
        """Raise ``CalibrationMismatch`` unless ``identity`` (ModelIdentity or None) is the fitted model."""
        want = self.model.get("sha256")
        got = None if identity is None else identity.sha256
        if got != want:
            name = "a predictor without a model identity" if identity is None else f"{identity.name} ({got[:12]})"
            raise CalibrationMismatch(
                f"calibration fitted for model {self.model.get('name')} ({str(want)[:12]}) cannot be applied to "
                f"{name}; fit one for this model with `kronos calibrate`")

    def _correction(self, c: float, h: int, j: int) -> float:
        lv = np.array(self.levels)
        if c < lv[0] - 1e-9 or c > lv[-1] + 1e-9:
            raise CalibrationError(f"central level {c:g} is outside the calibrated levels {list(self.levels)}; "
                                   "calibrate with --quantiles covering it")
        return float(np.interp(c, lv, self.corrections[:, h, j]))

    def quantiles(self, samples: np.ndarray, levels: Sequence[float], feature: str = "close") -> np.ndarray:
        """Corrected quantiles (Q, N, H) of one feature's samples (N, S, H), non-crossing.

        Level 0.5 and features outside ``self.features`` are the raw sample quantiles.
        """
        levels = [float(q) for q in levels]
        if samples.shape[2] > self.horizon:
            raise CalibrationError(f"horizon {samples.shape[2]} exceeds the calibrated horizon {self.horizon}")
        raw = np.quantile(samples, levels, axis=1)  # (Q, N, H)
        if feature not in self.features or not levels:
            return raw
        j = self.features.index(feature)
        mirror = np.quantile(samples, [1 - q for q in levels], axis=1)  # (Q, N, H)
        out = raw.astype(np.float64).copy()
        for qi, q in enumerate(levels):
            if abs(q - 0.5) < 1e-12:
                continue
            c, sign = abs(2 * q - 1), (1.0 if q > 0.5 else -1.0)
            lr, lm = _log(raw[qi]), _log(mirror[qi])
            width = np.abs(lr - lm) if self.method == "cqr-r" else 1.0
            for h in range(samples.shape[2]):
                corr = self._correction(c, h, j) * (width[:, h] if self.method == "cqr-r" else width)
                out[qi, :, h] = np.exp(lr[:, h] + sign * corr)
        order = np.argsort(levels)
        out[order] = np.sort(out[order], axis=0)  # rearrangement: quantiles never cross
        return out

    def apply(self, paths: np.ndarray, levels: Sequence[float], identity) -> np.ndarray:
        """Corrected quantiles (Q, B, H, 6) of sample paths (B, S, H, 6) for the model ``identity``."""
        self.check_model(identity)
        out = np.quantile(paths, list(levels), axis=1)  # (Q, B, H, 6)
        for f in self.features:
            fi = FEATURES.index(f)
            out[..., fi] = self.quantiles(paths[..., fi], levels, f)
        return out.astype(np.float32)
