"""The forecast ledger: every answered forecast recorded, scored once its truth is in the
store, summarized as live accuracy, and fed back to an adaptive (ACI) calibration.

A plain library (no Ray, no FastAPI): the service records and scores in the background
with it, ``kronos score`` scores from the command line. See ``docs/ledger.md``.

* ``Ledger``: append (``record``), read, retention;
* ``ForecastRecord`` / ``CalibrationStamp``: what one symbol's forecast records;
* ``score``: score what is scorable, once; ``accuracy``: rolling and all-time summaries;
* ``OnlineCalibration``: an ACI calibration's state updated by the scored forecasts.
"""

from kronos_core.ledger.accuracy import DEFAULT_WINDOW, accuracy, by_model_and_step, summarize
from kronos_core.ledger.adaptive import (
    OnlineCalibration,
    UpdateResult,
    corrections_hash,
    default_state_path,
)
from kronos_core.ledger.errors import LedgerError, LedgerWriteError, StateError
from kronos_core.ledger.ledger import Ledger, default_ledger_dir
from kronos_core.ledger.records import CalibrationStamp, ForecastRecord, series_hash
from kronos_core.ledger.scoring import ScoreResult, score

__all__ = [
    "DEFAULT_WINDOW", "CalibrationStamp", "ForecastRecord", "Ledger", "LedgerError",
    "LedgerWriteError", "OnlineCalibration", "ScoreResult", "StateError", "UpdateResult",
    "accuracy", "by_model_and_step", "corrections_hash", "default_ledger_dir", "default_state_path",
    "score", "series_hash", "summarize",
]
