"""How much history a forecast reads, and what the caller is told about it.

One set of rules for the service and ``kronos forecast``:

* ``check_horizon``: a horizon longer than the model's context is refused at once. The
  engine's window slides past the context while it generates, but the last step decodes
  the tokens back into candles in one pass over the last ``max_context`` tokens (as the
  reference does), so at most ``max_context`` candles come out.
* ``choose_lookback``: the lookback asked; else the lookback a loaded calibration was fitted
  at (its quantile corrections hold there); else ``max_context - horizon``, the most history
  whose window never slides (sliding is exact but slower).
* ``history_cut_message``: the warning when the history used is shorter than the lookback the
  caller asked (the series holds fewer candles), naming both lengths. Never for a lookback the
  caller did not ask (the model's default window, a calibration's fitted one): that window is
  shorter than a long stored history on every request, and a warning on every row teaches
  people to ignore warnings (issue 52). The answer's ``lookback`` says what was read and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LookbackSource = Literal["request", "calibration", "default"]


class HorizonTooLong(ValueError):
    """The horizon is longer than the model's context (``check_horizon``)."""


def horizon_limit_message(horizon: int, max_context: int) -> str | None:
    """Why ``horizon`` cannot be forecast by a model of context ``max_context``, or None."""
    if horizon <= max_context:
        return None
    return (f"horizon {horizon} is longer than the model's context (max_context {max_context}): "
            f"the model turns at most its last {max_context} tokens back into candles, so it "
            f"forecasts at most {max_context} candles per call; ask a horizon of at most "
            f"{max_context}")


def check_horizon(horizon: int, max_context: int) -> None:
    """Raise ``HorizonTooLong`` when ``horizon`` exceeds ``max_context``."""
    why = horizon_limit_message(horizon, max_context)
    if why is not None:
        raise HorizonTooLong(why)


@dataclass(frozen=True)
class Lookback:
    """The lookback a forecast reads and where it came from."""

    value: int
    source: LookbackSource
    note: str  # why this many, for people

    def as_dict(self) -> dict:
        return {"value": self.value, "source": self.source, "note": self.note}


def calibration_lookback(calibration) -> int | None:
    """The lookback a calibration was fitted at (``Calibration`` or its ``describe()`` dict):
    the longest context of its fitting windows; for a file fitted per group, the longest one
    inside every group's range, else the longest of any group. None: not recorded."""
    ranges = _lookback_ranges(calibration)
    if not ranges:
        return None
    lo, hi = max(r[0] for r in ranges), min(r[1] for r in ranges)
    return hi if lo <= hi else max(r[1] for r in ranges)


def _lookback_ranges(calibration) -> list[tuple[int, int]]:
    if isinstance(calibration, dict):
        groups = calibration.get("groups") or {}
        if groups:
            return [r for g in groups.values() for r in _lookback_ranges(g)]
        lb = (calibration.get("scope") or {}).get("lookback")
        return [] if lb is None else [(int(lb[0]), int(lb[1]))]
    members = getattr(calibration, "members", None) or {}
    if members:
        return [r for m in members.values() for r in _lookback_ranges(m)]
    lb = calibration.scope.lookback
    return [] if lb is None else [(int(lb[0]), int(lb[1]))]


def choose_lookback(asked: int | None, horizon: int, max_context: int,
                    calibration=None) -> Lookback:
    """The lookback of a forecast: ``asked``; else ``calibration``'s fitted lookback (a
    ``Calibration`` or its description; None: no calibration); else ``max_context - horizon``
    (at least 2)."""
    if asked is not None:
        return Lookback(int(asked), "request", f"lookback {asked} asked")
    fitted = None if calibration is None else calibration_lookback(calibration)
    if fitted is not None:
        return Lookback(fitted, "calibration",
                        f"no lookback asked: the calibration's fitted lookback {fitted}, where its "
                        "quantile corrections hold")
    value = max(2, max_context - horizon)
    return Lookback(value, "default",
                    f"no lookback asked: max_context {max_context} - horizon {horizon}, the most "
                    "history whose window does not slide")


def history_cut_message(used: int, held: int, lookback: Lookback) -> str | None:
    """Why a series' history of ``used`` candles is shorter than the caller asked, or None.

    ``held``: the candles the series holds (up to ``as_of``). Only a lookback the caller asked
    (``source == "request"``) is checked.
    """
    if lookback.source != "request" or used >= lookback.value:
        return None
    return (f"history of {used} candles, shorter than the lookback {lookback.value} asked: "
            f"the series holds {held}")
