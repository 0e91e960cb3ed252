"""Metrics of a run: one JSON object per step in ``metrics.jsonl``, and TensorBoard when
installed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


def read_metrics(folder: str | Path) -> list[dict]:
    path = Path(folder) / METRICS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class MetricsLog:
    """Appends step records; on resume keeps the records up to ``keep_until`` (later ones were not
    saved)."""

    def __init__(
        self, out: Path, enabled: bool = True, tensorboard: bool = True, keep_until: int = 0
    ):
        self.enabled, self.path, self.tb = enabled, Path(out) / METRICS_FILE, None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = [r for r in read_metrics(out) if r.get("step", 0) <= keep_until]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self.file = self.path.open("a")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(Path(out) / "tensorboard"))
            except ImportError:
                log.debug("tensorboard not installed; metrics go to %s only", self.path)

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("step", "epoch"):
                    self.tb.add_scalar(key, value, record["step"])

    def close(self) -> None:
        if not self.enabled:
            return
        self.file.close()
        if self.tb is not None:
            self.tb.close()
