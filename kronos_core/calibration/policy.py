"""The one calibration policy: whether a quantile calibration (``kronos calibrate``) applies to a
series' forecast, and what it corrects when it does.

- **Per series.** ``CalibrationPolicy.decide`` reads the series' history (its length as the
  lookback, its bar frequency) and its name (the group of a file fitted per series) against the
  calibration's scope (``Calibration.covers``): the decision names the member that applies, or
  says why none does.
- **What it corrects.** ``correct`` corrects the quantiles (``Calibration.apply``) and maps the
  sample paths onto the corrected distribution (``Calibration.correct_paths``), so summaries
  computed from the paths agree with the bands. The mean is the model's, uncorrected.

The library applies it in ``KronosPredictor.forecast`` / ``start_forecast`` when the options
carry a calibration; the service's replicas run the same call with the member the gateway
decided on. The gateway decides from a ``CalibrationDescription`` (plain values, no
corrections: what a replica reports in its ``ReplicaInfo``), built once per replica description.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kronos_core.base.options import QuantileCalibration
from kronos_core.calibration.conformal import Calibration
from kronos_core.calibration.scope import series_frequency


@dataclass(frozen=True)
class CalibrationDescription:
    """What a calibration covers, as plain values (no corrections), and the model it was fitted
    for: the ``model.calibration`` block of the service's answers, and the gateway's input to
    ``CalibrationPolicy.decide``."""

    model_name: str | None
    model_sha256: str | None
    # Calibration.describe(): method, levels, horizon, ...
    covers: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, calibration: Calibration) -> CalibrationDescription:
        return cls(
            calibration.model.get("name"), calibration.model.get("sha256"), calibration.describe()
        )

    def as_dict(self) -> dict[str, Any]:
        """The answer's ``model.calibration`` block."""
        return {"model_name": self.model_name, "model_sha256": self.model_sha256, **self.covers}


@dataclass(frozen=True)
class SeriesCalibration:
    """The decision for one series: applied (with the member of a file fitted per group, named
    by ``group``), or not, and why (None: nothing was asked, no warning)."""

    calibrate: bool = False
    group: str | None = None
    reason: str | None = None


class CalibrationPolicy:
    """Decides per series whether ``calibration`` applies (``decide``) and corrects a forecast
    with it (``correct``). Built once per calibration (or description): nothing per request."""

    def __init__(self, calibration: Calibration):
        self.calibration = calibration

    @classmethod
    def from_description(cls, description: CalibrationDescription) -> CalibrationPolicy:
        """A policy that decides exactly as the described calibration's would (no corrections:
        for the gateway, which decides, while the replicas correct)."""
        return cls(Calibration.from_description(description.covers))

    def covers(self, horizon: int, levels: Sequence[float]) -> bool:
        """Whether the calibration applies to this horizon and these levels at all."""
        return bool(levels) and self.calibration.covers(horizon, levels) is None

    def decide(
        self,
        horizon: int,
        levels: Sequence[float],
        history_timestamps: Any,
        name: str | None = None,
    ) -> SeriesCalibration:
        """The decision for one series: its history's length is the lookback, its timestamps give
        its
        bar frequency, ``name`` its group (files fitted per series). No levels: nothing to
        decide."""
        if not levels:
            return SeriesCalibration()
        ts = np.asarray(history_timestamps)
        frequency = series_frequency(ts) if len(ts) > 1 else None
        why = self.calibration.covers(horizon, levels, len(ts), frequency, name)
        if why is not None:
            return SeriesCalibration(reason=f"quantiles not calibrated: {why}")
        return SeriesCalibration(True, self.calibration.member_key(frequency, name))

    def member(self, group: str | None) -> Calibration:
        """The calibration a decision's ``group`` names (the whole file when it has no members)."""
        return (
            self.calibration.select(group=group) if self.calibration.members else self.calibration
        )


def correct(
    calibration: QuantileCalibration, paths: np.ndarray, levels: Sequence[float], identity: Any
) -> tuple[np.ndarray, np.ndarray]:
    """(corrected paths (B, S, H, 6), corrected quantiles (Q, B, H, 6)) of raw sample ``paths`` at
    quantile ``levels``, for the model ``identity`` (checked against the calibration's)."""
    quantiles = calibration.apply(paths, levels, identity)  # (Q, B, H, 6) from the raw paths
    return calibration.correct_paths(paths, identity), quantiles
