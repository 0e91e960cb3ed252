"""A model's forecasts through a calibration, scored as a distribution of their own.

``kronos eval --calibration F`` scores the model twice on the same windows: raw (its sample paths)
and calibrated. The calibrated distribution is scored through

* its corrected paths (``Calibration.correct_paths``: each path moved, rank by rank, onto the
  corrected quantiles) for CRPS, the point forecast (their mean), MASE, P(up) and PIT;
* its corrected quantiles (``Calibration.quantiles`` of the raw paths) for coverage and pinball.

A file fitted per group (``kronos calibrate --group-by``) applies each window its own series'
member; a series it does not cover is an error naming the series and why.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kronos_core.base.candles import FEATURES
from kronos_core.calibration.conformal import Calibration, CalibrationError
from kronos_core.calibration.scope import series_frequency

CLOSE = FEATURES.index("close")


class CalibratedPaths:
    """Paths (N, S, H, 6) of windows mapped through the calibration member of each window."""

    def __init__(self, calibration: Calibration, paths: np.ndarray, series_index: np.ndarray,
                 series: Sequence, lookback: int, identity, source: str | None = None):
        calibration.check_model(identity)
        self.calibration = calibration
        self.source = source
        self.raw_close = paths[..., CLOSE].astype(np.float64)  # (N, S, H)
        horizon = paths.shape[2]
        member_of: dict[int, Calibration] = {}
        for k in np.unique(series_index):
            s = series[int(k)]
            frequency = series_frequency(s.timestamps)
            why = calibration.covers(horizon, (), lookback, frequency, s.name)
            if why:
                raise CalibrationError(f"the calibration does not apply to {s.name}: {why}")
            member_of[int(k)] = calibration.select(frequency, s.name)
        self.groups: list[tuple[Calibration, np.ndarray]] = []  # (member, its windows)
        by_member: dict[int, list[int]] = {}
        members: dict[int, Calibration] = {}
        for k, member in member_of.items():
            by_member.setdefault(id(member), []).extend(np.flatnonzero(series_index == k).tolist())
            members[id(member)] = member
        corrected = np.empty_like(paths)
        for key, rows in by_member.items():
            idx = np.array(sorted(rows))
            corrected[idx] = members[key].correct_paths(paths[idx], identity)
            self.groups.append((members[key], idx))
        self.paths = corrected  # (N, S, H, 6)

    @property
    def method(self) -> str:
        return self.calibration.method

    def quantile_fn(self, idx: np.ndarray, horizon: int | None = None):
        """The corrected close quantiles (Q, n, h) of windows ``idx`` at any levels, their first
        ``horizon`` steps."""
        idx = np.asarray(idx)
        h = horizon or self.raw_close.shape[2]
        where = {int(i): j for j, i in enumerate(idx)}

        def qfn(levels):
            out = np.empty((len(levels), len(idx), h))
            for member, rows in self.groups:
                mine = [r for r in rows.tolist() if r in where]
                if not mine:
                    continue
                q = member.quantiles(self.raw_close[mine][:, :, :h], levels, "close")  # (Q, m, h)
                out[:, [where[r] for r in mine]] = q
            return out

        return qfn
