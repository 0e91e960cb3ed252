"""The adaptive calibration in the service: an ACI calibration (``kronos calibrate --method
aci``) whose state follows the scored forecasts (``kronos_core.ledger.OnlineCalibration``).

Who does what:

- the **gateway** whose scoring pass holds the ledger's lock feeds the newly scored steps to
  ``OnlineCalibration.update`` (``service.live_accuracy.GatewayAdaptation``), which continues the
  ACI walk and
  persists the new state atomically in the ledger folder
  (``<ledger>/calibration/<file stem>.state.json``, a version counter, the hash of its
  corrections, the time of the update). The file is the one shared state: every gateway
  starts its update from the latest state on disk, and a restart resumes it;
- each **replica** applies it (``ReplicaCalibration``): before each device batch it checks
  the state file (one ``stat``; re-read only when it changed) and corrects the batch with
  the current state; each result names the state it used (``ShardResult.calibration_state``),
  which the answer reports as ``calibration_state`` and the ledger records with its rows.

Why the replica reads the state and not the gateway: the replicas are what apply the
correction, so the state named in an answer is exactly the one its quantiles were corrected
with, even when an update lands during a request. Shipping the corrections with each shard
from the gateway would name it as exactly, but a ``Calibration`` travels inside the
``ForecastOptions`` replicas coalesce by, compared by identity, so every unpickled shard
would form a batch of its own.

With a static calibration (cqr, cqr-r, or a file fitted per group) nothing changes: the
stamp is version 0 and the hash of the file's corrections. Without a ledger (``off``) an
ACI calibration is applied as fitted (nothing is scored to update it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kronos_core.calibration.conformal import Calibration
from service.common.settings import Settings

if TYPE_CHECKING:
    from service.replica.step_runner import StepRunner

log = logging.getLogger(__name__)


def state_path(settings: Settings, method: str) -> str | None:
    """The shared state file of the configured ACI calibration (None: not adapted: static
    method, no calibration, or the ledger is off)."""
    ledger_dir = settings.resolved_ledger_dir() if settings.calibration else None
    if ledger_dir is None or method != "aci":
        return None
    from kronos_core.ledger.adaptive import default_state_path

    return str(default_state_path(ledger_dir, settings.calibration))  # type: ignore[arg-type]


class ReplicaCalibration:
    """The calibration a replica applies, kept current with the shared state file."""

    def __init__(self, settings: Settings, calibration: Calibration):
        from kronos_core.ledger.adaptive import OnlineCalibration

        self.online = OnlineCalibration(calibration, state_path(settings, calibration.method))
        if self.online.adaptive:
            log.info(
                "adaptive calibration: state %s, version %d",
                self.online.state_path,
                self.online.stamp.version,
            )

    @property
    def calibration(self) -> Calibration:
        return self.online.calibration

    def refresh(self, runner: StepRunner) -> dict:
        """Bring the runner's calibration to the latest persisted state (a ``stat`` when nothing
        changed; ``runner.use_calibration`` sets the calibration and its stamp together, so a
        job names the state it applied); returns that stamp. A state file that cannot be read
        keeps the state in use (logged), never fails the forecast."""
        try:
            if self.online.refresh():
                log.info("adaptive calibration: now version %d", self.online.stamp.version)
        except Exception as exc:  # StateError, OSError: keep applying the state in use
            log.warning(
                "adaptive calibration: state not refreshed (%s); applying version %d",
                exc,
                self.online.stamp.version,
            )
        stamp = self.online.stamp.as_dict()
        runner.use_calibration(self.online.calibration, stamp)
        return stamp
