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
  ``kronos_core.calibration.aci``) on the ``cqr`` scores, its step size ``gamma`` chosen by the
  same nested split; the file holds the state after walking every calibration window
  (effective levels and trailing scores) and its correction. Applied from a file the
  correction is static; it adapts when the walk is continued (``Calibration.walk``, used
  by ``kronos calibrate --holdout`` on the held-out windows) or the file is refitted.

A calibration is tied to the model it was fitted for (its identity's SHA-256);
applying it to another model raises ``CalibrationMismatch``.

It also records where it was fitted (``Scope``: the lookback range, the bar frequencies,
the series) and ``Calibration.covers`` says whether it applies to a request (horizon,
levels, lookback, frequency) or why not; files without a scope (older ones) are checked
on horizon and levels only. ``kronos calibrate --group-by frequency|series`` fits one
calibration per group into one file (``members``); ``covers`` and ``select`` pick the
group of a request.

Consistency of what a calibrated answer says: ``apply`` keeps the candle relations
(low <= open, close <= high) in every quantile column, and ``correct_paths`` maps the
sample paths onto the corrected distribution (per step, a monotone map from the raw to the
corrected quantiles) so that summaries computed from paths (VaR, P(up)) agree with the bands.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kronos_core.base.candles import FEATURES
from kronos_core.calibration import aci
from kronos_core.calibration.scope import Scope, series_frequency

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
        raise CalibrationError(
            "calibration works on log prices: forecasts and truths must be positive"
        )
    return np.log(x)


def conformal_quantile(scores: np.ndarray, level: float) -> float:
    """The ceil((n + 1) level)-th smallest score (the CQR correction)."""
    s = np.sort(np.asarray(scores, dtype=np.float64))
    k = math.ceil((len(s) + 1) * level)
    if k > len(s):
        need = math.ceil(level / (1 - level))
        raise CalibrationError(
            f"{len(s)} calibration windows are too few for a {level:g} interval; "
            f"need at least {need} (raise --windows)"
        )
    return float(s[k - 1])


def _scores(lo, hi, y, method):
    lo, hi, y = _log(lo), _log(hi), _log(y)
    e = np.maximum(lo - y, y - hi)
    return e / np.maximum(hi - lo, 1e-12) if method == "cqr-r" else e


def conformity_scores(
    samples: np.ndarray, truth: np.ndarray, levels: Sequence[float], fidx: Sequence[int],
    method: str = "cqr",
) -> np.ndarray:
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
        raise CalibrationError(
            f"{n} windows but {len(issued)} issue and {len(resolved)} resolution times"
        )
    return np.argsort(issued, kind="stable"), issued, resolved


def select_method(samples, truth, levels, fidx, issued, resolved) -> tuple[str, dict]:
    """``cqr`` or ``cqr-r``: fitted on the first half of the (time-ordered) windows, the one whose
    close coverage on the later ones is nearer nominal (ties: cqr). Returns it and the gaps."""
    n = len(truth)
    start = aci.split_point(issued, resolved, n // 2)
    if start >= n:
        raise CalibrationError(
            "select: no calibration window is issued after the first half's truths are known"
        )
    close = fidx.index(FEATURES.index("close")) if FEATURES.index("close") in fidx else 0
    gaps = {}
    for m in ("cqr", "cqr-r"):
        corr = _static_corrections(
            conformity_scores(samples[: n // 2], truth[: n // 2], levels, fidx, m), levels
        )
        later = conformity_scores(samples[start:], truth[start:], levels, fidx, m)  # (N', C, H, F)
        gaps[m] = aci.coverage_gap(later, np.broadcast_to(corr, later.shape), levels, close)
    # min keeps the first (cqr) on ties
    best = min(("cqr", "cqr-r"), key=lambda m: round(gaps[m], 12))
    return best, gaps


def enforce_candle_order(values: np.ndarray) -> np.ndarray:
    """``values`` (..., 6) with high raised to max(open, high, low, close) and low lowered to
    min(open, high, low, close): low <= open, close <= high. Applied to quantile columns of
    one level, each column non-decreasing in the level, the result still is (max and min of
    non-decreasing functions)."""
    o, h, lo, c = (FEATURES.index(f) for f in ("open", "high", "low", "close"))
    out = values.copy()
    prices = values[..., [o, h, lo, c]]
    out[..., h] = prices.max(axis=-1)
    out[..., lo] = prices.min(axis=-1)
    return out


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
    # method "aci": the walk's state after the calibration windows
    state: aci.ACIState | None = None
    scope: Scope = field(default_factory=Scope)  # where it was fitted (unknown in older files)
    # per group (file fitted per group)
    members: dict[str, Calibration] = field(default_factory=dict)
    group_by: str | None = None  # what the members are keyed by: "frequency" or "series"

    @property
    def horizon(self) -> int:
        if self.members:
            return min(m.horizon for m in self.members.values())
        return int(self.corrections.shape[1])

    @classmethod
    def grouped(cls, members: dict[str, Calibration], group_by: str) -> Calibration:
        """One calibration holding one member per group (same model, levels and features; the
        method may differ when ``select`` chose per group: then the whole says ``select``)."""
        if not members:
            raise CalibrationError("no group to calibrate")
        first = next(iter(members.values()))
        for name, m in members.items():
            if (m.levels, m.features, m.model.get("sha256")) != (first.levels, first.features,
                                                                  first.model.get("sha256")):
                raise CalibrationError(
                    f"group {name}: fitted differently from group {next(iter(members))}"
                )
        method = first.method if len({m.method for m in members.values()}) == 1 else "select"
        scopes = [m.scope for m in members.values()]
        info = {"groups": {k: m.info.get("windows") for k, m in members.items()}}
        whole = Scope(
            None, tuple(sorted({f for sc in scopes for f in (sc.frequencies or ())})) or None,
            tuple(s for sc in scopes for s in (sc.series or ())) or None,
        )
        return cls(
            method, dict(first.model), first.levels, first.features,
            np.zeros((len(first.levels), 0, len(first.features))), info, None, whole, dict(members),
            group_by,
        )

    # ---- scope ---------------------------------------------------------------------------
    def member_for(
        self, frequency: str | None = None, group: str | None = None
    ) -> tuple[Calibration | None, str]:
        """(the calibration that applies to a series of this bar ``frequency`` / named ``group``,
        or None; a reason when None). Without members: this calibration."""
        if not self.members:
            return self, ""
        key = (
            group
            if self.group_by == "series" or (group is not None and group in self.members)
            else frequency
        )
        if key is None:
            return None, f"calibrated per {self.group_by}; the request's {self.group_by} is unknown"
        member = self.members.get(key)
        if member is None:
            return None, f"no group for {self.group_by} {key}; fitted for {', '.join(self.members)}"
        return member, ""

    def covers(self, horizon: int, levels: Sequence[float], lookback: int | None = None,
               frequency: str | None = None, group: str | None = None) -> str | None:
        """None when this calibration applies to a forecast of ``horizon`` steps, quantile
        ``levels``, ``lookback`` context candles of bars of ``frequency`` (of the series or
        group ``group``, for files fitted per series); else why not, e.g. "fitted for horizon
        5, asked 8". Unknown request fields (None) and unrecorded scope fields are not checked."""
        member, reason = self.member_for(frequency, group)
        if member is None:
            return reason
        if horizon > member.horizon:
            return f"fitted for horizon {member.horizon}, asked {horizon}"
        lv = member.levels
        central = [abs(2 * float(q) - 1) for q in levels if abs(float(q) - 0.5) > 1e-12]
        outside = [c for c in central if not lv[0] - 1e-9 <= c <= lv[-1] + 1e-9]
        if outside:
            return (
                f"fitted for central levels {lv[0]:g}-{lv[-1]:g}, asked "
                f"{', '.join(f'{c:g}' for c in outside)} (quantiles "
                + ", ".join(f"{q:g}" for q in levels if abs(2 * float(q) - 1) in outside)
                + ")"
            )
        return member.scope.mismatch(lookback, frequency)

    def member_key(self, frequency: str | None = None, group: str | None = None) -> str | None:
        """The name of the member that applies to a series (None: no members, or none applies)."""
        if not self.members:
            return None
        key = (
            group
            if self.group_by == "series" or (group is not None and group in self.members)
            else frequency
        )
        return key if key in self.members else None

    def describe(self) -> dict:
        """What a calibration covers, as plain values (no corrections): method, levels, horizon,
        features, scope and, for a file fitted per group, each group's; ``from_description``
        rebuilds a calibration that answers ``covers`` the same way (the service's gateway
        decides with it, the replicas hold the corrections)."""
        out = {"method": self.method, "levels": list(self.levels), "horizon": self.horizon,
               "features": list(self.features), "scope": self.scope.to_dict()}
        if self.members:
            out["group_by"] = self.group_by
            out["groups"] = {k: m.describe() for k, m in self.members.items()}
        return out

    @classmethod
    def from_description(cls, d: dict, model: dict | None = None) -> Calibration:
        """A calibration without corrections (zeros) from ``describe``'s dict, for ``covers``;
        older descriptions (levels and horizon only) give today's rule."""
        if d.get("groups"):
            members = {k: cls.from_description(v, model) for k, v in d["groups"].items()}
            return cls.grouped(members, d.get("group_by") or "frequency")
        levels = tuple(sorted(float(c) for c in d["levels"]))
        features = tuple(d.get("features") or PRICE_FEATURES)
        corr = np.zeros((len(levels), int(d["horizon"]), len(features)))
        return cls(str(d.get("method", "cqr")), dict(model or {}), levels, features, corr,
                   scope=Scope.from_dict(d.get("scope")))

    def for_series(self, horizon: int, levels: Sequence[float], lookback: int, timestamps,
                   group: str | None = None) -> tuple[Calibration | None, str | None]:
        """(the calibration, or group member, to apply to one series' forecast, None) or (None,
        why not): ``covers`` with the series' bar frequency read off its history ``timestamps``."""
        frequency = series_frequency(timestamps) if len(timestamps) > 1 else None
        why = self.covers(horizon, levels, lookback, frequency, group)
        return (None, why) if why else (self.select(frequency, group), None)

    def select(self, frequency: str | None = None, group: str | None = None) -> Calibration:
        """The member for a series (``member_for``); raises ``CalibrationError`` with the reason."""
        member, reason = self.member_for(frequency, group)
        if member is None:
            raise CalibrationError(reason)
        return member

    # ---- fit / file ---------------------------------------------------------------------
    @classmethod
    def fit(cls, samples: np.ndarray, truth: np.ndarray, levels: Sequence[float], model: dict,
            method: str = "cqr", features: Sequence[str] = PRICE_FEATURES, info: dict | None = None,
            issued=None, resolved=None, scope: Scope | None = None) -> Calibration:
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
            samples, truth, issued, resolved = (
                samples[order], truth[order], issued[order], resolved[order],
            )
        if method == "select":
            method, gaps = select_method(samples, truth, levels, fidx, issued, resolved)
            info["selection"] = {
                "chosen": method, "validation_gap": gaps,
                "rule": "nearest nominal on the later half of the calibration windows",
            }
        scores = conformity_scores(
            samples, truth, levels, fidx, "cqr" if method == "aci" else method
        )
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
        return cls(
            method, dict(model), levels, tuple(features), corr, info, state, scope or Scope()
        )

    def walk(self, samples: np.ndarray, truth: np.ndarray, issued, resolved) -> np.ndarray:
        """ACI continued through new windows (time order): the correction (N, C, H, F) issued to
        each, the state updated only with windows whose truth ended by its issue time.
        For ``cqr``/``cqr-r`` files: the static correction for every window."""
        self._single()
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
        return conformity_scores(
            samples, truth, self.levels, fidx, "cqr" if self.method == "aci" else self.method
        )

    def to_dict(self) -> dict:
        if self.members:
            return {
                "format": FORMAT, "method": self.method, "citation": self._citation(),
                "model": self.model, "levels": list(self.levels), "features": list(self.features),
                "horizon": self.horizon, "scope": self.scope.to_dict(), "group_by": self.group_by,
                "info": self.info, "groups": {k: m.to_dict() for k, m in self.members.items()},
            }
        return {
            "format": FORMAT, "method": self.method,
            "citation": CITATION + ("; " + aci.CITATION if self.method == "aci" else ""),
            "model": self.model, "levels": list(self.levels), "features": list(self.features),
            "horizon": self.horizon,
            "corrections": {
                f: {
                    f"{c:g}": self.corrections[ci, :, j].tolist()
                    for ci, c in enumerate(self.levels)
                }
                for j, f in enumerate(self.features)
            },
            "info": self.info, "scope": self.scope.to_dict(),
            **({"aci_state": self.state.to_dict()} if self.state is not None else {}),
        }

    def _citation(self) -> str:
        return CITATION + ("; " + aci.CITATION if self.method == "aci" else "")

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
                raise CalibrationError(
                    f"{path}: not a calibration file (format {d.get('format')!r}, want {FORMAT})"
                )
            return cls._from_dict(d)
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, CalibrationError):
                raise
            raise CalibrationError(f"cannot read calibration {path}: {exc}") from exc

    @classmethod
    def _from_dict(cls, d: dict) -> Calibration:
        if "groups" in d:
            members = {str(k): cls._from_dict(v) for k, v in d["groups"].items()}
            whole = cls.grouped(members, d.get("group_by") or "frequency")
            whole.info = d.get("info", whole.info)
            return whole
        levels = tuple(float(c) for c in d["levels"])
        feats = tuple(d["features"])
        # (C, F, H)
        corr = np.array([[d["corrections"][f][f"{c:g}"] for f in feats] for c in levels])
        state = aci.ACIState.from_dict(d["aci_state"], levels) if "aci_state" in d else None
        return cls(
            d["method"], d["model"], levels, feats, corr.transpose(0, 2, 1), d.get("info", {}),
            state, Scope.from_dict(d.get("scope")),
        )

    # ---- apply ---------------------------------------------------------------------------
    def check_model(self, identity) -> None:
        """Raise ``CalibrationMismatch`` unless ``identity`` (ModelIdentity or None) is the fitted
        model."""
        want = self.model.get("sha256")
        got = None if identity is None else identity.sha256
        if got != want:
            name = (
                "a predictor without a model identity"
                if identity is None
                else f"{identity.name} ({identity.sha256[:12]})"
            )
            raise CalibrationMismatch(
                f"calibration fitted for model {self.model.get('name')} ({str(want)[:12]}) cannot "
                f"be applied to {name}; fit one for this model with `kronos calibrate`"
            )

    def _correction(self, c: float, h: int, j: int) -> float:
        lv = np.array(self.levels)
        if c < lv[0] - 1e-9 or c > lv[-1] + 1e-9:
            raise CalibrationError(
                f"central level {c:g} is outside the calibrated levels {list(self.levels)}; "
                "calibrate with --quantiles covering it"
            )
        return float(np.interp(c, lv, self.corrections[:, h, j]))

    def quantiles(
        self, samples: np.ndarray, levels: Sequence[float], feature: str = "close"
    ) -> np.ndarray:
        """Corrected quantiles (Q, N, H) of one feature's samples (N, S, H), non-crossing.

        Level 0.5 and features outside ``self.features`` are the raw sample quantiles.
        """
        self._single()
        levels = [float(q) for q in levels]
        if samples.shape[2] > self.horizon:
            raise CalibrationError(
                f"horizon {samples.shape[2]} exceeds the calibrated horizon {self.horizon}"
            )
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
                # cqr-r
                corr = self._correction(c, h, j) * (
                    width[:, h] if isinstance(width, np.ndarray) else width
                )
                out[qi, :, h] = np.exp(lr[:, h] + sign * corr)
        order = np.argsort(levels)
        out[order] = np.sort(out[order], axis=0)  # rearrangement: quantiles never cross
        return out

    def _single(self) -> None:
        if self.members:
            raise CalibrationError(
                f"this calibration was fitted per {self.group_by} ({', '.join(self.members)}): "
                "pick the group of the series first (Calibration.select / covers)"
            )

    def apply(self, paths: np.ndarray, levels: Sequence[float], identity) -> np.ndarray:
        """Corrected quantiles (Q, B, H, 6) of sample paths (B, S, H, 6) for the model ``identity``.

        Each price feature's quantiles are corrected on their own, then the candle relations are
        restored in every level's columns (``enforce_candle_order``: low <= open, close <= high),
        so e.g. ``high_q0.05`` is never below ``close_q0.05``."""
        self.check_model(identity)
        out = np.quantile(paths, list(levels), axis=1)  # (Q, B, H, 6)
        for f in self.features:
            fi = FEATURES.index(f)
            out[..., fi] = self.quantiles(paths[..., fi], levels, f)
        if set(PRICE_FEATURES) <= set(self.features):
            out = enforce_candle_order(out)
        return out.astype(np.float32)

    def _correction_curve(self, c: np.ndarray, h: int, j: int) -> np.ndarray:
        """Corrections at any central levels ``c`` (S,): interpolated between the calibrated
        levels, from 0 at the median (level 0, left raw as ``quantiles`` does) to the narrowest
        one, and held at the widest one's beyond it."""
        lv = np.concatenate([[0.0], self.levels])
        corr = np.concatenate([[0.0], self.corrections[:, h, j]])
        return np.interp(c, lv, corr)

    def correct_paths(self, paths: np.ndarray, identity) -> np.ndarray:
        """Sample paths (B, S, H, 6) mapped onto the corrected distribution, for summaries that
        must agree with the corrected quantiles (VaR, expected shortfall, P(up)).

        Per series, step and calibrated feature, the sample of rank r (of S) stands for level
        ``(r + 0.5) / S``; it is moved to the corrected quantile of that level (the raw quantile,
        i.e. itself, widened in log space by the correction of its central level, ``cqr-r``
        scaled by its interval's width). The map is monotone (rearranged so), so each path keeps
        its rank at each step, the median stays raw, and ``np.quantile`` of the result at a
        calibrated level is the corrected quantile up to the interpolation between ranks. The
        candle relations are restored on every path afterwards. Features not calibrated (volume,
        amount) are unchanged."""
        self.check_model(identity)
        self._single()
        paths = np.asarray(paths)
        b, s, h, _ = paths.shape
        if h > self.horizon:
            raise CalibrationError(f"horizon {h} exceeds the calibrated horizon {self.horizon}")
        level = (np.arange(s) + 0.5) / s  # (S,) level of each rank
        central, sign = np.abs(2 * level - 1), np.sign(level - 0.5)  # (S,), (S,)
        out = paths.astype(np.float64).copy()
        for j, f in enumerate(self.features):
            fi = FEATURES.index(f)
            order = np.argsort(paths[..., fi], axis=1, kind="stable")  # (B, S, H)
            logs = _log(np.take_along_axis(paths[..., fi], order, axis=1))  # (B, S, H) ascending
            # mirror rank: 1 - level
            width = np.abs(logs - logs[:, ::-1]) if self.method == "cqr-r" else 1.0
            moved = np.empty_like(logs)
            for step in range(h):
                shift = sign * self._correction_curve(central, step, j)  # (S,)
                w = width[:, :, step] if isinstance(width, np.ndarray) else 1.0  # cqr-r: an array
                moved[:, :, step] = logs[:, :, step] + shift[None, :] * w
            moved = np.sort(moved, axis=1)  # rearrangement: a monotone map of the ranks
            np.put_along_axis(out[..., fi], order, np.exp(moved), axis=1)
        if set(PRICE_FEATURES) <= set(self.features):
            out = enforce_candle_order(out)
        return out.astype(paths.dtype)
