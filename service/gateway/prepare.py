"""Stage 1, prepare: a request's series as arrays, in request order. Store windows or inline
candles (``service.gateway.inline``), each with its future timestamps
(``service.gateway.future``), its warnings (``stale``: ``service.gateway.stale``) and its daily
price-limit rule (``kronos_core.base.price_limits``); what cannot be used becomes a per-symbol
error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from kronos_core.base.errors import ErrorCode, WarningCode
from kronos_core.base.lookback import Lookback, history_cut_message, horizon_limit_message
from kronos_core.base.price_limits import PriceLimitRule, rule_for
from kronos_core.data.symbol_exchange import exchange_from_symbol
from kronos_core.data.timestamps import calendar_of
from service.common.errors import RequestInvalid
from service.common.interfaces import CandleStore
from service.common.schemas import ForecastRequest
from service.gateway.future import SessionGaps, to_ns
from service.gateway.inline import inline_arrays
from service.gateway.stale import portfolio_as_of, staleness


def symbol_error(symbol: str, code: ErrorCode, message: str) -> dict:
    """One entry of the answer's ``errors`` list."""
    return {"symbol": symbol, "code": code, "message": message}


def symbol_warning(code: WarningCode, message: str) -> dict:
    """One entry of a forecast's ``warnings`` list."""
    return {"code": code, "message": message}


@dataclass
class _Series:
    """One usable series on its way to a shard."""

    symbol: str
    values: np.ndarray  # (L, 6) float32
    ts: np.ndarray  # (L,) datetime64[ns]
    session: tuple[str | None, str] | None = None  # (timezone, session_timezone) from metadata
    # venue whose calendar gives the future timestamps (request or metadata)
    exchange: str | None = None
    warnings: list[dict] = field(default_factory=list)  # {code, message}
    held: int | None = None  # candles the series holds (store: up to as_of); None: len(values)
    # the stamps its sessions are learned from when no calendar is known (store: the history
    # before the window too, ``SymbolWindow.template_stamps``); None: ``ts``
    template_ts: np.ndarray | None = None
    price_limit: PriceLimitRule | None = None  # its daily price-limit rule (None: none)
    as_of: np.datetime64 | None = None  # the request's as_of as the series' wall clock


@dataclass
class Prepared:
    """The request's usable series, in request order, and the per-symbol errors."""

    symbols: list[str] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)  # (L_i, 6) float32
    x_ts: list[np.ndarray] = field(default_factory=list)  # (L_i,) datetime64[ns]
    y_ts: list[np.ndarray] = field(default_factory=list)  # (H,) datetime64[ns]
    warnings: list[list[dict]] = field(default_factory=list)  # per usable series: {code, message}
    errors: list[dict] = field(default_factory=list)  # {symbol, code, message}
    store_version: int | None = None  # the store version read (None: inline series)
    # per usable series its daily price-limit rule (None: its market has none)
    price_limits: list[PriceLimitRule | None] = field(default_factory=list)
    as_of: np.datetime64 | None = None  # the portfolio's as-of (``service.gateway.stale``)


def _wall_clock(t: pd.Timestamp, tz: str | None) -> pd.Timestamp:
    """``t`` as a naive wall-clock time of zone ``tz`` (how the store keeps stamps)."""
    if t.tzinfo is None:
        return t
    return (t.tz_convert(tz) if tz else t).tz_localize(None)


def check_horizon(horizon: int, max_context: int) -> None:
    """``RequestInvalid`` naming ``horizon`` and the model's limit when the horizon is longer
    than the model's context (``kronos_core.base.lookback``); checked before any store read."""
    why = horizon_limit_message(horizon, max_context)
    if why is not None:
        raise RequestInvalid("horizon", why)


def check_exchange(exchange: str) -> None:
    """``RequestInvalid`` naming ``exchange`` when no calendar of that name exists."""
    from kronos_core.data.calendars import UnknownExchangeError, exchange_sessions
    from kronos_core.data.round_clock import round_clock_name

    if round_clock_name(exchange):
        return  # 24/7, 24/5: no venue calendar needed
    try:
        exchange_sessions(exchange)
    except UnknownExchangeError as exc:
        raise RequestInvalid("exchange", str(exc)) from None


def _store_series(
    store: CandleStore, req: ForecastRequest, lookback: int, out: Prepared
) -> list[_Series]:
    # the store reads a naive as_of as each symbol's wall clock, an aware one converted; its
    # year is within the store's range (``ForecastRequest`` refuses others with a 422)
    as_of = None if req.as_of is None else pd.Timestamp(req.as_of)
    # one read: every window of one store version, which the answer names
    batch = store.read_windows(
        list(req.symbols or []), lookback, as_of=as_of, frequency=req.frequency
    )
    out.store_version = batch.store_version
    errors = out.errors
    errors.extend(symbol_error(e.symbol, ErrorCode(e.code), e.message) for e in batch.errors)
    items = []
    for win in batch.windows:
        meta = win.metadata
        try:
            rule = rule_for(win.symbol, meta, req.exchange)
        except ValueError as exc:  # metadata an import did not write
            errors.append(symbol_error(win.symbol, ErrorCode.INVALID_SERIES,
                                       f"store metadata, price limit: {exc}"))
            continue
        session = (
            (meta.get("timezone"), meta["session_timezone"])
            if meta.get("session_timezone")
            else None
        )
        item = _Series(
            win.symbol, np.asarray(win.values, dtype=np.float32), to_ns(win.timestamps), session,
            req.exchange or calendar_of(meta), held=win.held,
            template_ts=None if req.exchange else win.template_stamps, price_limit=rule,
        )
        if as_of is not None:
            item.as_of = np.datetime64(_wall_clock(as_of, meta.get("timezone")), "ns")
        items.append(item)
    return items


def _inline_series(req: ForecastRequest, lookback: int, errors: list[dict]) -> list[_Series]:
    items = []
    seen: dict[str, int] = {}
    for j, s in enumerate(req.series or []):
        if s.symbol in seen:
            errors.append(
                symbol_error(
                    s.symbol, ErrorCode.INVALID_SERIES,
                    f"series[{j}]: symbol {s.symbol!r} repeats series[{seen[s.symbol]}]; names "
                    "must be unique",
                )
            )
            continue
        seen[s.symbol] = j
        try:
            values, ts = inline_arrays(s, lookback)
        except ValueError as exc:
            errors.append(symbol_error(s.symbol, ErrorCode.INVALID_SERIES, f"series[{j}]: {exc}"))
            continue
        # no exchange given: the one the symbol's suffix names (600000.SH: XSHG), if any
        exchange = req.exchange or exchange_from_symbol(s.symbol)
        items.append(_Series(s.symbol, values, ts, exchange=exchange, held=len(s.candles),
                             price_limit=rule_for(s.symbol, None, exchange)))
    return items


def _next_slots(future: Callable[..., np.ndarray], history: np.ndarray,
                session: tuple[str | None, str] | None,
                exchange: str | None) -> Callable[[int], np.ndarray]:
    """``n`` -> the series' next ``n`` slots (its future timestamps), for ``stale``'s count."""
    return lambda n: future(history, n, session, exchange)


_GAPS = SessionGaps()  # per process: histories repeat across requests


def prepare(req: ForecastRequest, lookback: int | Lookback, store: CandleStore,
            future: Callable[..., np.ndarray], min_history_warning: int,
            gaps: Callable[..., str | None] = _GAPS) -> Prepared:
    """The request's usable series with their future timestamps; a series with fewer than
    ``min_history_warning`` candles is forecast with a ``short_history`` warning, one whose
    history is shorter than the lookback the caller asked with a ``history_cut`` warning naming
    both lengths (``kronos_core.base.lookback``); one that skips sessions of its known
    exchange with a ``missing_sessions`` warning (``gaps``: how many, the first few); a store
    series behind the portfolio (``service.gateway.stale``) with a ``stale`` warning, or with
    ``exclude_stale`` left out and listed in the errors as ``stale``."""
    out = Prepared()
    if not isinstance(lookback, Lookback):
        lookback = Lookback(int(lookback), "request", f"lookback {lookback}")
    if req.symbols is not None:
        items = _store_series(store, req, lookback.value, out)
    else:
        items = _inline_series(req, lookback.value, out.errors)
    short = min_history_warning
    out.as_of = portfolio_as_of([it.ts[-1] for it in items])
    # store series only: an inline series ends where its caller cut it
    stored = req.symbols is not None
    for it in items:
        try:
            history = it.ts if it.template_ts is None else it.template_ts
            y = future(history, req.horizon, it.session, it.exchange)
            late = staleness(
                it.ts[-1], y, _next_slots(future, history, it.session, it.exchange),
                out.as_of, it.as_of, it.exchange,
            ) if stored else None
        except Exception as exc:
            out.errors.append(
                symbol_error(it.symbol, ErrorCode.NO_CALENDAR, f"future timestamps: {exc}")
            )
            continue
        if late is not None:
            if req.exclude_stale:
                out.errors.append(symbol_error(
                    it.symbol, ErrorCode.STALE, f"left out (exclude_stale): {late.message()}"
                ))
                continue
            it.warnings.append(symbol_warning(WarningCode.STALE, late.message()))
        if len(it.values) < short:
            it.warnings.append(
                symbol_warning(
                    WarningCode.SHORT_HISTORY,
                    f"{len(it.values)} candles of history, fewer than {short}: the forecast has "
                    "little to go on",
                )
            )
        held = len(it.values) if it.held is None else it.held
        cut = history_cut_message(len(it.values), held, lookback)
        if cut is not None:
            it.warnings.append(symbol_warning(WarningCode.HISTORY_CUT, cut))
        gap = gaps(it.ts, it.exchange)
        if gap is not None:
            it.warnings.append(symbol_warning(WarningCode.MISSING_SESSIONS, gap))
        out.symbols.append(it.symbol)
        out.values.append(it.values)
        out.x_ts.append(it.ts)
        out.y_ts.append(y)
        out.warnings.append(it.warnings)
        out.price_limits.append(it.price_limit)
    if req.symbols is not None:  # errors in request order, like the forecasts
        order = {s: i for i, s in enumerate(req.symbols)}
        out.errors.sort(key=lambda e: order.get(e["symbol"], len(order)))
    return out
