"""Daily price limits of the Chinese exchanges, and sample paths held inside them.

The rules are the exchanges' (sources in ``docs/price-limits.md``): a stock's price may move at
most a fixed fraction of the previous close in one trading day, by board, special-treatment
(ST, *ST) status and date, and new listings trade without a limit for their first days. A
``PriceLimitRule`` is one symbol's rule; ``rule_for`` reads it from the symbol and its store
metadata (``board``, ``special_treatment``, ``listed``, ``exchange``); ``step_limits`` gives the
fraction each forecast step may move (by the step's date); ``limit_paths`` clips sample paths to
those bands step by step, each step's band around the previous step's limited close.

Markets without daily limits (US, FX, crypto, ...) have no rule (``rule_for`` gives None).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

# boards with a daily limit; "none" in a symbol's metadata says it has none
BOARDS = ("main", "star", "chinext", "bse")
BOARD_NAMES = {"main": "main board", "star": "STAR Market", "chinext": "ChiNext",
               "bse": "Beijing Stock Exchange"}
NO_LIMIT_BOARD = "none"

# dates the rules changed (the first trading day of the new rule)
CHINEXT_REFORM = np.datetime64("2020-08-24")  # ChiNext: 10% -> 20%, ST 5% -> 20%
MAIN_REGISTRATION = np.datetime64("2023-04-10")  # main-board listings: first 5 days unlimited
MAIN_ST_TEN = np.datetime64("2026-07-06")  # main-board ST: 5% -> 10%
FREE_DAYS_REFORMED = 5  # trading days without a limit after a listing under registration
LIMIT_EXCHANGES = ("XSHG", "XSHE", "BSE")  # where rule_for looks for a rule

# code prefixes of each exchange's stocks (6-digit codes); anything else (indices, funds,
# bonds) gets no rule
_SH = (("688", "star"), ("689", "star"), ("600", "main"), ("601", "main"), ("603", "main"),
       ("605", "main"), ("900", "main"))
_SZ = (("300", "chinext"), ("301", "chinext"), ("000", "main"), ("001", "main"),
       ("002", "main"), ("003", "main"), ("200", "main"))
_BJ = (("920", "bse"), ("8", "bse"), ("4", "bse"))
_PREFIXES = {"XSHG": _SH, "XSHE": _SZ, "BSE": _BJ}
_SUFFIX_EXCHANGE = {"SH": "XSHG", "SS": "XSHG", "SZ": "XSHE", "BJ": "BSE"}
_CODE = re.compile(r"^(?:(SH|SZ|BJ))?(\d{6})(?:\.(SH|SS|SZ|BJ))?$")


def trading_days(stamps: Any) -> np.ndarray:
    """(N,) datetime64[D]: the local dates of ``stamps`` (an aware time's own wall clock, not
    UTC's: 00:00 in Shanghai is the previous day in UTC)."""
    idx = pd.DatetimeIndex(np.asarray(stamps) if not isinstance(stamps, pd.Index) else stamps)
    if idx.tz is not None:
        idx = idx.tz_localize(None)
    return idx.to_numpy().astype("datetime64[D]")


@dataclass(frozen=True)
class PriceLimitRule:
    """One symbol's daily price-limit rule.

    ``special_treatment`` None: not known (the rule without it is used and the description says
    so). ``listed``: the first trading day, when the metadata has it (the first days after a
    listing have their own rule). ``source``: where the rule came from, for the answer."""

    board: str  # one of BOARDS
    special_treatment: bool | None = None
    listed: np.datetime64 | None = None  # datetime64[D]
    source: str = ""

    def __post_init__(self) -> None:
        if self.board not in BOARDS:
            raise ValueError(f"price-limit board must be one of {BOARDS}, got {self.board!r}")
        if self.listed is not None:
            object.__setattr__(self, "listed", np.datetime64(str(self.listed)[:10], "D"))

    def band(self, day: np.datetime64) -> float:
        """The fraction of the previous close a trading day of date ``day`` may move."""
        st = bool(self.special_treatment)
        if self.board == "main":
            return 0.05 if st and day < MAIN_ST_TEN else 0.10
        if self.board == "chinext":
            if day < CHINEXT_REFORM:
                return 0.05 if st else 0.10
            return 0.20
        return 0.20 if self.board == "star" else 0.30

    def free_days(self) -> int:
        """Trading days after the listing without a limit: 5 under the registration rules
        (STAR, ChiNext from 2020-08-24, main board from 2023-04-10), 1 on the Beijing exchange
        and for older listings (whose first day is limited around the issue price, which the
        history does not hold: that one day is left unlimited)."""
        if self.listed is None:
            return 0
        reformed = (self.board == "star"
                    or (self.board == "chinext" and self.listed >= CHINEXT_REFORM)
                    or (self.board == "main" and self.listed >= MAIN_REGISTRATION))
        return FREE_DAYS_REFORMED if reformed else 1

    def step_limits(self, history: np.ndarray, future: np.ndarray) -> np.ndarray:
        """(H,) float64: the fraction each forecast step may move from the previous close;
        ``inf`` where the step has no limit (a new listing's first days).

        history (L,) and future (H,) datetime64: the series' stamps and its forecast's. A step's
        trading day after the listing counts the history's days on or after ``listed``, plus the
        weekdays from ``listed`` to the history's first day when the window starts later."""
        days = trading_days(future)  # (H,)
        out = np.array([self.band(d) for d in days], dtype=np.float64)  # (H,)
        free, listed = self.free_days(), self.listed
        if free and listed is not None:
            past = trading_days(history)  # (L,)
            before = int((past >= listed).sum())
            if len(past) and past[0] > listed:
                before += int(np.busday_count(listed, past[0]))
            ordinal = before + np.arange(1, len(days) + 1)  # (H,) trading day since the listing
            out[ordinal <= free] = np.inf
        return out

    def describe(self, limits: np.ndarray | None = None,
                 future: np.ndarray | None = None) -> str:
        """The rule in words, e.g. ``main board ±10%, ST status unknown``; with a forecast's
        ``limits`` (H,) and ``future`` stamps, the bands it used over the horizon."""
        name = BOARD_NAMES[self.board]
        if self.special_treatment:
            name += " ST"
        if limits is None or future is None or not len(limits):
            bands = f"±{self.band(np.datetime64('today', 'D')):.0%} today"
        else:
            days = trading_days(future)
            parts, start = [], 0
            for k in range(1, len(limits) + 1):
                if k == len(limits) or limits[k] != limits[start]:
                    lim = limits[start]
                    text = "no limit" if not np.isfinite(lim) else f"±{lim:.0%}"
                    if start or k < len(limits):  # the band changes within the horizon
                        text += f" {days[start]}..{days[k - 1]}"
                    parts.append(text)
                    start = k
            bands = ", ".join(parts)
        out = f"{name} {bands}"
        if self.special_treatment is None:
            out += ", ST status unknown"
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"board": self.board, "special_treatment": self.special_treatment,
                "listed": None if self.listed is None else str(self.listed),
                "source": self.source}

    def report(self, history: np.ndarray, future: np.ndarray, applied: bool) -> dict[str, Any]:
        """What an answer says of the rule for one forecast: ``rule`` (``describe``), the
        fields of ``as_dict``, ``applied`` and ``step_limits`` (None: no limit that step)."""
        limits = self.step_limits(history, future)  # (H,)
        return {"rule": self.describe(limits, future), **self.as_dict(), "applied": applied,
                "step_limits": [float(x) if np.isfinite(x) else None for x in limits]}


def exchange_of(symbol: str, exchange: str | None = None) -> str | None:
    """The exchange a symbol trades on by its suffix or prefix (``600518.SH``, ``SZ000001``,
    ``430047.BJ``), else ``exchange`` (the stored or asked one; ``XSHE`` and ``XSHG`` as named,
    ``BJSE`` as ``BSE``)."""
    m = _CODE.match(str(symbol).strip().upper())
    tag = (m.group(3) or m.group(1)) if m else None
    if tag:
        return _SUFFIX_EXCHANGE[tag]
    if exchange is None:
        return None
    name = str(exchange).strip().upper()
    return "BSE" if name in ("BJSE", "BSE") else name


def board_of(symbol: str, exchange: str | None) -> str | None:
    """The board of a stock by its 6-digit code on ``exchange`` (``exchange_of``); None when
    the code is not a stock of a board with limits (an index such as 000001.SH, a fund)."""
    ex = exchange_of(symbol, exchange)
    m = _CODE.match(str(symbol).strip().upper())
    if ex not in _PREFIXES or m is None:
        return None
    code = m.group(2)
    return next((board for prefix, board in _PREFIXES[ex] if code.startswith(prefix)), None)


def parse_flag(value: Any, what: str) -> bool | None:
    """A yes/no metadata or file value as a bool (None, "" : unknown); ``ValueError`` naming
    ``what`` otherwise."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text == "":
        return None
    if text in ("1", "true", "yes", "y", "st"):
        return True
    if text in ("0", "false", "no", "n"):
        return False
    raise ValueError(f"{what}: expected yes/no (true/false, 1/0), got {value!r}")


def rule_for(symbol: str, meta: Mapping[str, Any] | None = None,
             exchange: str | None = None) -> PriceLimitRule | None:
    """A symbol's rule from its metadata, else from its exchange and code; None: no limit.

    ``meta`` keys read: ``board`` (one of ``BOARDS`` or ``"none"``), ``special_treatment``
    (yes/no), ``listed`` (first trading day), ``exchange``. ``exchange``: the request's, when
    the metadata has none. A ``board`` in the metadata wins over the code; without one, the
    code prefix on the exchange (suffix ``.SH``/``.SZ``/``.BJ`` first) decides."""
    meta = meta or {}
    st = parse_flag(meta.get("special_treatment"), f"{symbol}: special_treatment")
    listed = meta.get("listed")
    try:
        listed_day = None if listed in (None, "") else np.datetime64(str(listed)[:10], "D")
    except ValueError:
        raise ValueError(f"{symbol}: listed {listed!r} is not a date (YYYY-MM-DD)") from None
    board = meta.get("board")
    if board:
        board = str(board).strip().lower()
        if board == NO_LIMIT_BOARD:
            return None
        return PriceLimitRule(board, st, listed_day, "metadata")
    ex = exchange_of(symbol, meta.get("exchange") or exchange)
    board = board_of(symbol, ex)
    if board is None:
        return None
    return PriceLimitRule(board, st, listed_day, f"code {symbol} on {ex}")


def limit_table(rules: Sequence[PriceLimitRule | None], histories: Sequence[Any],
                futures: Sequence[Any]) -> np.ndarray | None:
    """(B, H) float64 fractions per series and step (``inf``: no limit), or None when no series
    has a rule. ``histories`` / ``futures``: each series' stamps and forecast stamps."""
    if not any(r is not None for r in rules):
        return None
    if not (len(rules) == len(histories) == len(futures)):
        raise ValueError(f"{len(rules)} price-limit rules for {len(histories)} series")
    horizon = len(futures[0]) if len(futures) else 0
    table = np.full((len(rules), horizon), np.inf)  # (B, H)
    for i, rule in enumerate(rules):
        if rule is not None:
            table[i] = rule.step_limits(histories[i], futures[i])
    return table


def limit_paths(paths: np.ndarray, last_close: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """Sample paths held inside the daily limits, step by step.

    paths (B, S, H, 6) in ``FEATURES`` order; last_close (B,) the last observed close; limits
    (B, H) fractions (``inf``: none). Step h's open, high, low and close are clipped to
    ``[c * (1 - limit), c * (1 + limit)]`` around ``c``, the path's limited close of step h - 1
    (step 1: ``last_close``); volume and amount are left as they are. Clipping is monotone, so
    high >= open, close >= low stay true where they held. The band is not rounded to the
    exchange's 0.01 tick (docs/price-limits.md says why). Returns a new float32 array."""
    out = np.array(paths, dtype=np.float32, copy=True)  # (B, S, H, 6)
    b, s, h = out.shape[:3]
    prev = np.broadcast_to(np.asarray(last_close, np.float64)[:, None], (b, s)).copy()  # (B, S)
    for k in range(h):
        lim = limits[:, k][:, None]  # (B, 1)
        finite = np.isfinite(lim)  # (B, 1)
        safe = np.where(finite, lim, 0.0)  # (B, 1)
        lo = np.where(finite, prev * (1.0 - safe), -np.inf)[..., None]  # (B, S, 1)
        hi = np.where(finite, prev * (1.0 + safe), np.inf)[..., None]  # (B, S, 1)
        out[:, :, k, :4] = np.clip(out[:, :, k, :4], lo, hi)  # (B, S, 4)
        prev = out[:, :, k, 3].astype(np.float64)  # (B, S)
    return out


def limit_envelope(last_close: np.ndarray, limits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lowest, highest), each (B, H): the prices a path held inside ``limits`` (B, H) can reach
    at each step from ``last_close`` (B,): limit-down (limit-up) every step until then."""
    lim = np.where(np.isfinite(limits), limits, np.nan)  # (B, H)
    last = np.asarray(last_close, np.float64)[:, None]  # (B, 1)
    lo = last * np.cumprod(1.0 - lim, axis=1)  # (B, H)
    hi = last * np.cumprod(1.0 + lim, axis=1)  # (B, H)
    # a step without a limit frees every later step
    free = np.cumsum(~np.isfinite(limits), axis=1) > 0  # (B, H)
    return np.where(free, -np.inf, lo), np.where(free, np.inf, hi)


def limit_quantiles(quantiles: np.ndarray, last_close: np.ndarray,
                    limits: np.ndarray) -> np.ndarray:
    """Quantiles (Q, B, H, 6) with the prices clipped to ``limit_envelope`` (a calibration's
    widened bands stay where a limited path can go). Returns a new float32 array."""
    lo, hi = limit_envelope(last_close, limits)  # (B, H) each
    out = np.array(quantiles, dtype=np.float32, copy=True)  # (Q, B, H, 6)
    out[..., :4] = np.clip(out[..., :4], lo[None, :, :, None], hi[None, :, :, None])
    return out


RULES_IN_SHORT = (
    "Shanghai and Shenzhen main boards ±10% (ST ±5% before 2026-07-06), STAR Market ±20%, "
    "ChiNext ±20% from 2020-08-24 (±10%, ST ±5% before), Beijing ±30%; a new listing's first "
    "days (5 under the registration rules, else 1) without a limit; no limit elsewhere "
    "(docs/price-limits.md)"
)


def price_limits_info(enabled: bool) -> dict[str, Any]:
    """The feature as ``/v1/models`` describes it."""
    return {"enabled": bool(enabled), "exchanges": list(LIMIT_EXCHANGES),
            "rules": RULES_IN_SHORT}
