"""``/ui``: the forecast explorer, a page the gateway serves itself (docs/interfaces.md, "The
forecast explorer").

The page is plain HTML and JavaScript (``service/static/ui``) with one vendored charting
library (``service/static/vendor/lightweight-charts``: TradingView's Lightweight Charts,
Apache-2.0, its licence beside it). Every file comes from this package, so the page works where
nothing outside is reachable. The page and its assets are served without an API key (the page
asks for one, ``service.auth.OPEN_PREFIXES``); the API calls it makes carry the key and go
through the same key and scope checks as any client's.

Also here: the answer of ``GET /v1/candles`` (``candles_answer``), the stored candles the page
draws under a forecast, and after ``as_of`` the actual candles that followed it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from fastapi import FastAPI, HTTPException
from fastapi.responses import Response

from kronos_core.base.candles import FEATURES
from service.common.answer import iso_times

STATIC = Path(__file__).parent / "static"
UI_PATH = "/ui"
ASSETS_PATH = "/ui/assets"
# the files the page loads: name -> (file under STATIC, media type)
ASSETS: dict[str, tuple[str, str]] = {
    "app.js": ("ui/app.js", "text/javascript"),
    "app.css": ("ui/app.css", "text/css"),
    "lightweight-charts.js": (
        "vendor/lightweight-charts/lightweight-charts.standalone.production.js", "text/javascript"
    ),
}


def install_ui(app: FastAPI) -> None:
    """Add ``GET /ui`` and ``GET /ui/assets/{name}`` to ``app``. The page names its assets and
    the API by relative URLs, so it also works under a route prefix (a Serve app mounted at
    ``/name``)."""

    @app.get(UI_PATH, include_in_schema=False)
    async def ui_page() -> Response:
        body = (STATIC / "ui" / "index.html").read_bytes()
        return Response(body, media_type="text/html; charset=utf-8",
                        headers={"Cache-Control": "no-cache"})

    @app.get(ASSETS_PATH + "/{name}", include_in_schema=False)
    async def ui_asset(name: str) -> Response:
        if name not in ASSETS:
            raise HTTPException(404, f"no ui asset {name!r}")
        file, media = ASSETS[name]
        return Response((STATIC / file).read_bytes(), media_type=media,
                        headers={"Cache-Control": "no-cache"})


def _span(frame_ts: np.ndarray, values: np.ndarray) -> dict[str, Any]:
    """(L,) times and (L, 6) candles -> ``CandleSpan``'s JSON."""
    return {
        "timestamps": iso_times(frame_ts),
        "candles": {name: values[:, k].astype(float).tolist() for k, name in enumerate(FEATURES)},
    }


def candles_answer(
    store: Any, symbol: str, before: int, after: int, as_of: Any = None,
    frequency: str | None = None,
) -> dict[str, Any]:
    """``GET /v1/candles``: the last ``before`` stored candles of ``symbol`` at or before
    ``as_of`` (None: the latest), and with ``as_of`` up to ``after`` candles stored after it.
    ``store`` is a ``KlineReader``. A symbol the store cannot give (unknown, invalid, nothing
    up to ``as_of``) is a 404 with the store's message and code: the request is valid, its
    resource is not there (a schema-valid request is never refused with 422).
    """
    batch = store.read_windows([symbol], before, as_of=as_of, frequency=frequency)
    if batch.errors:
        err = batch.errors[0]
        # the code, not the store's message: that one names the store's folder on the server
        raise HTTPException(404, f"symbol {symbol!r}: {err.code} in the store"
                                 + (f" at as_of {as_of}" if as_of is not None else ""))
    window = batch.windows[0]
    later_ts = np.array([], "datetime64[ns]")
    later = np.zeros((0, len(FEATURES)), np.float32)
    if as_of is not None and after > 0:
        frame = store.read(symbol, frequency, start=window.timestamps[-1])
        frame = frame[frame.iloc[:, 0] > pd.Timestamp(window.timestamps[-1])].iloc[:after]
        later_ts = frame.iloc[:, 0].to_numpy("datetime64[ns]")
        later = frame[list(FEATURES)].to_numpy(np.float32)  # (A, 6)
    return {
        "symbol": symbol,
        "history": _span(window.timestamps, window.values),
        "after": _span(later_ts, later),
    }
