"""Where a calibration was fitted (``Scope``) and the bar frequency of a series, so a
calibration is applied only where it matches (``Calibration.covers``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scope:
    """What a calibration was fitted on; a field left None was not recorded (older files) and
    is not checked."""

    lookback: tuple[int, int] | None = None  # shortest and longest context of the fitting windows
    frequencies: tuple[str, ...] | None = None  # bar frequencies of the fitting series ("1d", "1h")
    # the series fitted on (recorded; groups are matched by name)
    series: tuple[str, ...] | None = None

    def to_dict(self) -> dict:
        return {"lookback": None if self.lookback is None else list(self.lookback),
                "frequencies": None if self.frequencies is None else list(self.frequencies),
                "series": None if self.series is None else list(self.series)}

    @classmethod
    def from_dict(cls, d: dict | None) -> Scope:
        d = d or {}
        lb, fr, se = d.get("lookback"), d.get("frequencies"), d.get("series")
        return cls(
            None if lb is None else (int(lb[0]), int(lb[1])),
            None if fr is None else tuple(map(str, fr)),
            None if se is None else tuple(map(str, se)),
        )

    def mismatch(self, lookback: int | None, frequency: str | None) -> str | None:
        """Why a request of this ``lookback`` and bar ``frequency`` is outside the scope, or
        None."""
        if self.lookback is not None and lookback is not None:
            lo, hi = self.lookback
            if not lo <= lookback <= hi:
                fitted = f"{lo}" if lo == hi else f"{lo}-{hi}"
                return f"fitted for lookback {fitted}, asked {lookback}"
        if (
            self.frequencies is not None
            and frequency is not None
            and frequency not in self.frequencies
        ):
            return f"fitted on {'/'.join(self.frequencies)} bars, asked {frequency}"
        return None


def series_frequency(timestamps) -> str | None:
    """Bar frequency of a series (``1d``, ``1h``, ``5min``...), None when it cannot be told."""
    from kronos_core.data.sessions import infer_frequency

    try:
        return infer_frequency(timestamps)
    except ValueError:
        return None
