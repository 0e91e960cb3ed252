"""``KronosClient``: the forecasting service from Python, answers as DataFrames.

::

    from kronos_core.client import KronosClient
    client = KronosClient("http://127.0.0.1:8000", api_key=None)
    out = client.forecast(["AAPL", "MSFT"], horizon=10, sample_count=20, quantiles=(0.1, 0.9))
    out.frame     # one row per (symbol, step): symbol, step, timestamp, open ... amount (the mean),
                  # <feature>_q<level> per quantile: the layout of ForecastResult.to_frame
    out.errors    # per-symbol errors [{symbol, code, message}], beside the frame, never raised
    out.table     # the same answer as a pyarrow Table (the service's Arrow stream)

Only the standard library speaks HTTP (``urllib``); pandas and pyarrow are the package's own
dependencies. What it does for the caller:

- **Chunks.** A portfolio longer than ``chunk_size`` symbols (or inline series) goes in several
  requests, one after the other, and the answers are joined in request order; a chunk the
  service refuses as too large (413 ``too_large``) is split in two and sent again.
- **Keys** go in the ``X-API-Key`` header, never in the URL.
- **Back-pressure.** A 503 (``overloaded``, ``shutting_down``, ``replica_unavailable``) or a 429
  (``rate_limited``) is retried after its ``Retry-After`` seconds (at most ``max_wait_s`` each),
  ``max_retries`` times per request; then, and for every other error, ``KronosServiceError`` is
  raised with the service's status, error code and message.
- **Deadlines.** ``deadline_s`` goes in the ``X-Kronos-Timeout-S`` header (default: the service's
  own deadline). A request the service plans past its deadline is refused at once (422
  ``deadline_unreachable``, nothing run): ``KronosServiceError`` then carries the service's words
  (the estimate, the deadline, what would fit) and ``plan``, the same as figures
  (``plan["fits"]``: the most symbols, ``sample_count`` or ``horizon`` that fit, and the
  ``timeout_s`` the request would need; a smaller ``chunk_size`` is fewer symbols per request).
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kronos_core.base.candles import FEATURES
from kronos_core.base.errors import ErrorCode
from kronos_core.base.options import quantile_column

ARROW_STREAM = "application/vnd.apache.arrow.stream"
RETRIED_STATUSES = (429, 503)  # the service says when to come back (Retry-After)


class KronosServiceError(RuntimeError):
    """The service refused a whole request: ``status`` (HTTP), ``code`` (its error code, e.g.
    ``unauthorized``, ``invalid_request``, ``deadline_unreachable``), ``message`` (its detail)
    and, for ``deadline_unreachable``, ``plan`` (the planned seconds, the deadline, ``fits``: what
    would fit; None otherwise)."""

    def __init__(self, status: int, code: str | None, message: str, plan: dict | None = None):
        super().__init__(f"HTTP {status} {code or 'error'}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.plan = plan


@dataclass
class Forecast:
    """One portfolio's answer, joined over its chunks."""

    frame: pd.DataFrame  # one row per (symbol, step); see the module docstring
    errors: list[dict] = field(default_factory=list)  # {symbol, code, message} per failed symbol
    inputs: list[dict] = field(default_factory=list)  # {symbol, history_length, last_timestamp,
    #                                      last_close, warnings, price_limit} per answered symbol
    model: dict = field(default_factory=dict)  # the model that answered (GET /v1/models' entry)
    tables: list[Any] = field(default_factory=list, repr=False)  # pyarrow Tables, one per chunk
    requests: int = 0  # HTTP requests sent (chunks, splits and retries)
    retries: int = 0  # of which waits on Retry-After

    @property
    def table(self) -> Any:
        """The answer as one pyarrow Table (the chunks' tables concatenated)."""
        import pyarrow as pa

        return pa.concat_tables(self.tables) if self.tables else pa.table({})

    @property
    def warnings(self) -> dict[str, list[dict]]:
        """symbol -> its warnings (``short_history``, ``history_cut``, ...)."""
        return {i["symbol"]: i.get("warnings", []) for i in self.inputs}

    @property
    def price_limits(self) -> dict[str, dict | None]:
        """symbol -> the daily price-limit rule its paths were held to (``rule``, ``applied``,
        ``step_limits``...; docs/price-limits.md), None where its market has none."""
        return {i["symbol"]: i.get("price_limit") for i in self.inputs}


def _detail(body: bytes) -> tuple[str | None, str, dict | None]:
    """(code, message, plan) of an error body: ``{"detail", "code"}``, or FastAPI's 422 list
    (with ``code`` and ``plan`` beside it for a request planned past its deadline, whose message
    is the service's words as they are)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None, body[:300].decode("utf-8", "replace"), None
    if not isinstance(parsed, dict):
        return None, str(parsed)[:300], None
    detail = parsed.get("detail")
    plan = parsed.get("plan") if isinstance(parsed.get("plan"), dict) else None
    if isinstance(detail, list):  # 422: [{loc, msg, type}, ...]
        entries = [d for d in detail if isinstance(d, dict)]
        if parsed.get("code") == ErrorCode.DEADLINE_UNREACHABLE:
            text = "; ".join(str(d.get("msg", "")) for d in entries)
        else:
            text = "; ".join(
                f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg', '')}"
                for d in entries
            )
        return parsed.get("code", ErrorCode.INVALID_REQUEST.value), text, plan
    return parsed.get("code"), str(detail), plan


def _frame_of_table(table: Any) -> pd.DataFrame:
    """The Arrow answer's forecast columns as ``ForecastResult.to_frame``'s layout."""
    frame = table.to_pandas()
    frame["symbol"] = frame["symbol"].astype(str)  # a dictionary column -> text, as to_frame
    frame["timestamp"] = frame["timestamp"].astype("datetime64[ns]")
    return frame


class KronosClient:
    """The service at ``url`` (e.g. ``http://127.0.0.1:8000``, or a route prefix under it).

    ``chunk_size``: symbols or inline series per request (the service's own limit,
    ``KRONOS_MAX_SYMBOLS``, is 10,000 by default). ``max_retries``: waits on 429/503 per request
    before ``KronosServiceError``. ``max_wait_s``: the longest single wait (a longer Retry-After
    is cut to it). ``timeout_s``: per HTTP request. ``deadline_s``: the service's deadline for
    each forecast request (``X-Kronos-Timeout-S``; None: the service's default). ``sleep``: how
    to wait (tests pass their own)."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        chunk_size: int = 1000,
        max_retries: int = 5,
        max_wait_s: float = 60.0,
        timeout_s: float = 600.0,
        deadline_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.chunk_size = chunk_size
        self.max_retries = max_retries
        self.max_wait_s = max_wait_s
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self.sleep = sleep

    # ------------------------------------------------------------------ public calls
    def forecast(
        self, symbols: Sequence[str], horizon: int, **options: Any
    ) -> Forecast:
        """Forecast store symbols. ``options`` are the request's fields (``POST /v1/forecast``):
        ``sample_count``, ``quantiles``, ``seed``, ``temperature``, ``top_k``, ``top_p``,
        ``lookback``, ``as_of``, ``exchange``, ``frequency``, ``repair``, ``summary``, ``record``,
        ``price_limits``.
        """
        if isinstance(symbols, str):
            raise TypeError("symbols must be a sequence of symbols, not one string")
        items = list(symbols)
        if not items:
            raise ValueError("symbols is empty")
        return self._chunked("symbols", items, horizon, options)

    def forecast_frame(
        self,
        df: pd.DataFrame,
        horizon: int,
        *,
        symbol_column: str = "symbol",
        timestamp_column: str = "timestamps",
        **options: Any,
    ) -> Forecast:
        """Forecast candles you hold (sent inline): ``df`` has one row per candle with
        ``symbol_column``, ``timestamp_column``, ``open``, ``high``, ``low``, ``close`` and
        optionally ``volume`` and ``amount``, oldest first per symbol. A frame without
        ``symbol_column`` is one series named ``series``. Options as ``forecast`` (no ``as_of``:
        cut the frame instead)."""
        missing = [c for c in (timestamp_column, "open", "high", "low", "close")
                   if c not in df.columns]
        if missing:
            raise ValueError(f"df has no column(s) {missing}; it has {list(df.columns)}")
        groups = (
            df.groupby(symbol_column, sort=False) if symbol_column in df.columns
            else [("series", df)]
        )
        cols = [c for c in FEATURES if c in df.columns]
        series = []
        for name, part in groups:
            times = pd.DatetimeIndex(part[timestamp_column]).strftime("%Y-%m-%dT%H:%M:%S")
            values = part[cols].to_numpy(np.float64)
            rows = [[t, *(None if not math.isfinite(v) else float(v) for v in row)]
                    for t, row in zip(times, values)]
            series.append({"symbol": str(name), "candles": rows})
        return self._chunked("series", series, horizon, options)

    def symbols(self) -> list[str]:
        """Every symbol of the service's store (``GET /v1/symbols``, all pages)."""
        out: list[str] = []
        while True:
            page = json.loads(self._send("GET", f"/v1/symbols?limit=10000&offset={len(out)}")[1])
            out += page["symbols"]
            if len(out) >= page["total"] or not page["symbols"]:
                return out

    def models(self) -> list[dict]:
        """The model that answers (``GET /v1/models``)."""
        return json.loads(self._send("GET", "/v1/models")[1])["models"]

    # ------------------------------------------------------------------ chunks
    def _chunked(self, kind: str, items: list, horizon: int, options: dict) -> Forecast:
        out = Forecast(frame=pd.DataFrame())
        frames: list[pd.DataFrame] = []
        pending = [items[i:i + self.chunk_size] for i in range(0, len(items), self.chunk_size)]
        while pending:
            chunk = pending.pop(0)
            body = {kind: chunk, "horizon": horizon, **options}
            try:
                content_type, payload = self._send("POST", "/v1/forecast", body, out)
            except KronosServiceError as exc:
                if exc.code == ErrorCode.TOO_LARGE and len(chunk) > 1:  # split it, keep the order
                    half = len(chunk) // 2
                    pending[:0] = [chunk[:half], chunk[half:]]
                    continue
                raise
            self._add_answer(out, frames, content_type, payload)
        out.frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        return out

    def _add_answer(self, out: Forecast, frames: list, content_type: str, payload: bytes) -> None:
        import pyarrow as pa

        if ARROW_STREAM in content_type:
            table = pa.ipc.open_stream(payload).read_all()
            meta = {k.decode(): v for k, v in (table.schema.metadata or {}).items()}
            out.errors += json.loads(meta.get("kronos.errors", b"[]"))
            out.inputs += json.loads(meta.get("kronos.inputs", b"[]"))
            out.model = json.loads(meta.get("kronos.model", b"{}"))
            out.tables.append(table)
            frames.append(_frame_of_table(table))
        else:  # a JSON answer (e.g. a gateway that answers JSON only): the same frame from it
            body = json.loads(payload)
            out.errors += body.get("errors", [])
            out.model = body.get("model", {})
            for f in body.get("forecasts", []):
                out.inputs.append({k: f[k] for k in ("symbol", "history_length",
                                                     "last_timestamp", "last_close", "warnings",
                                                     "price_limit")
                                   if k in f})
            frames.append(_frame_of_json(body.get("forecasts", [])))

    # ------------------------------------------------------------------ HTTP
    def _send(
        self, method: str, path: str, body: dict | None = None, stats: Forecast | None = None
    ) -> tuple[str, bytes]:
        """(content type, body) of a 2xx answer; 429/503 waited out (``Retry-After``) up to
        ``max_retries`` times; any other error status raises ``KronosServiceError``."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": f"{ARROW_STREAM}, application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["X-API-Key"] = self.api_key
        if self.deadline_s is not None and path == "/v1/forecast":
            headers["X-Kronos-Timeout-S"] = f"{self.deadline_s:g}"
        attempt = 0
        while True:
            request = urllib.request.Request(self.url + path, data, headers, method=method)
            if stats is not None:
                stats.requests += 1
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return response.headers.get("Content-Type", ""), response.read()
            except urllib.error.HTTPError as exc:
                payload = exc.read()
                code, message, plan = _detail(payload)
                if exc.code in RETRIED_STATUSES and attempt < self.max_retries:
                    attempt += 1
                    if stats is not None:
                        stats.retries += 1
                    self.sleep(self._wait_s(exc.headers.get("Retry-After"), attempt))
                    continue
                raise KronosServiceError(exc.code, code, message, plan) from None

    def _wait_s(self, retry_after: str | None, attempt: int) -> float:
        """The service's ``Retry-After`` (seconds), else 1, 2, 4 ... s; at most ``max_wait_s``."""
        try:
            wait = float(retry_after) if retry_after is not None else 2.0 ** (attempt - 1)
        except ValueError:  # an HTTP date: not sent by this service
            wait = 2.0 ** (attempt - 1)
        return min(max(wait, 0.0), self.max_wait_s)


def _frame_of_json(forecasts: list[dict]) -> pd.DataFrame:
    """The JSON answer's forecasts in ``ForecastResult.to_frame``'s layout (float32 values)."""
    parts = []
    for f in forecasts:
        h = len(f["timestamps"])
        part: dict[str, Any] = {
            "symbol": np.full(h, f["symbol"], dtype=object),
            "step": np.arange(1, h + 1, dtype=np.int32),
            "timestamp": pd.DatetimeIndex(f["timestamps"]).as_unit("ns").to_numpy(),
        }
        for name in FEATURES:
            part[name] = np.asarray(f["mean"][name], np.float32)
        for label, candles in (f.get("quantiles") or {}).items():
            for name in FEATURES:
                part[quantile_column(name, float(label))] = np.asarray(candles[name], np.float32)
        parts.append(pd.DataFrame(part))
    if not parts:
        return pd.DataFrame()
    frame = pd.concat(parts, ignore_index=True)
    frame["symbol"] = frame["symbol"].astype(str)
    return frame
