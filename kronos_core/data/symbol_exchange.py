"""The exchange a symbol trades on, read from its suffix (``600000.SH`` -> ``XSHG``).

Chinese vendors (Tushare, Wind, Yahoo, Baostock exports) write an A-share code with its
venue as a suffix. ``exchange_from_symbol`` maps it to the venue's ISO MIC, whose calendar
``kronos_core.data.calendars`` then uses (holidays, lunch break):

| suffix | venue | MIC | calendar |
|---|---|---|---|
| ``.SH``, ``.SS`` | Shanghai Stock Exchange | ``XSHG`` | ``XSHG`` |
| ``.SZ`` | Shenzhen Stock Exchange | ``XSHE`` | ``XSHG``'s (``calendars.SAME_CALENDAR``) |
| ``.BJ`` | Beijing Stock Exchange | ``BJSE`` | ``XSHG``'s (``calendars.SAME_CALENDAR``) |

exchange_calendars (4.13) has no calendar for Shenzhen or Beijing (its ``XBSE`` is Bucharest);
both trade on Shanghai's days and hours (set by the CSRC) and keep their own name in the
metadata (``BJSE`` is the name this project records for Beijing). A symbol with no known
suffix has no exchange from its name (None). ``overrides`` (``{".BJ": "XSHG"}``, or ``None``
as a value to turn a suffix off) take precedence: ``kronos import --suffix-exchange``.
"""

from __future__ import annotations

from collections.abc import Mapping

SUFFIX_EXCHANGES: dict[str, str] = {".SH": "XSHG", ".SS": "XSHG", ".SZ": "XSHE", ".BJ": "BJSE"}


def exchange_from_symbol(
    symbol: str, overrides: Mapping[str, str | None] | None = None
) -> str | None:
    """The MIC ``symbol``'s suffix names (any case; ``SUFFIX_EXCHANGES`` updated by
    ``overrides``), or None when it names none."""
    table: dict[str, str | None] = dict(SUFFIX_EXCHANGES)
    for suffix, mic in (overrides or {}).items():
        table[normalize_suffix(suffix)] = mic
    dot = symbol.rfind(".")
    if dot <= 0:
        return None
    return table.get(symbol[dot:].upper())


def normalize_suffix(suffix: str) -> str:
    """``sh``, ``.sh`` -> ``.SH``. Raises ``ValueError`` for an empty or dotted-inside one."""
    s = suffix.strip().upper()
    s = s if s.startswith(".") else "." + s
    if len(s) < 2 or "." in s[1:]:
        raise ValueError(f"symbol suffix {suffix!r}: expected a suffix such as .SH")
    return s


def parse_suffix_overrides(items: list[str] | None) -> dict[str, str | None]:
    """``--suffix-exchange .BJ=XSHG`` items as overrides (``.BJ=`` or ``.BJ=none``: no
    exchange from that suffix). Raises ``ValueError`` naming a malformed item."""
    out: dict[str, str | None] = {}
    for item in items or []:
        suffix, sep, mic = item.partition("=")
        if not sep:
            raise ValueError(f"--suffix-exchange {item!r}: expected SUFFIX=MIC, e.g. .BJ=XSHG")
        mic = mic.strip()
        out[normalize_suffix(suffix)] = None if mic.lower() in ("", "none") else mic
    return out
