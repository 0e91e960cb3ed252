"""``kronos_core.client.KronosClient`` over real HTTP against a small stand-in service (a
standard-library HTTP server on a loopback port) that answers with the gateway's own encoders
(``service.gateway.encode``): chunks within the service's symbol limit, in request order; a
413 chunk split in two; 503/429 waited out per ``Retry-After``, at most ``max_retries`` times;
other errors raised with the service's code and message; per-symbol errors beside the frame;
the JSON answer read into the same frame as the Arrow one. The client against the real service,
and its frame against ``KronosPredictor.forecast``: tests/integration/test_client_http.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import orjson
import pandas as pd
import pytest
from http_stub import send

from kronos_core.client import KronosClient, KronosServiceError

pytest.importorskip("fastapi")
from service.common.answer import ForecastAnswer  # noqa: E402
from service.gateway.encode import answer_to_arrow, answer_to_json  # noqa: E402

MODEL = {
    "name": "stand-in", "sha256": "ab" * 32, "model_sha256": "cd" * 32,
    "tokenizer_sha256": "ef" * 32, "bundled": True, "random_weights": True, "max_context": 64,
    "dtype": "float32", "sliding": "exact", "compile": False,
}
ARROW = "application/vnd.apache.arrow.stream"


def _answer(symbols: list[str], horizon: int, levels: tuple[float, ...]) -> ForecastAnswer:
    """Each symbol's mean close is its number (S0042 -> 42) plus the step; unknown ones (U...)
    are per-symbol errors."""
    ok = [s for s in symbols if not s.startswith("U")]
    ts = pd.date_range("2024-05-01", periods=horizon, freq="D").to_numpy()
    means = [np.full((horizon, 6), float(s[1:]), np.float32) + np.arange(horizon)[:, None]
             for s in ok]  # (H, 6) each
    return ForecastAnswer(
        model=MODEL, symbols=ok, history_length=[8] * len(ok),
        last_timestamp=[ts[0] - np.timedelta64(1, "D")] * len(ok), last_close=[1.0] * len(ok),
        warnings=[[]] * len(ok), timestamps=[ts] * len(ok), mean=means,
        quantiles=[np.stack([m - 1 for _ in levels]) if levels else None for m in means],
        summaries=[None] * len(ok),
        errors=[{"symbol": s, "code": "unknown_symbol", "message": f"unknown symbol {s!r}"}
                for s in symbols if s.startswith("U")],
        timing={"total_ms": 1.0}, quantile_levels=levels,
    )


class StandIn:
    """The service's limits and refusals, scripted: ``max_symbols`` per request (422 above),
    ``max_series_bytes`` (413 above), and ``refusals``: statuses to answer first, in order."""

    def __init__(self, max_symbols=1000, max_body_bytes=10**9, refusals=(), json_only=False):
        self.max_symbols, self.max_body_bytes = max_symbols, max_body_bytes
        self.refusals = list(refusals)
        self.json_only = json_only
        self.bodies: list[dict] = []
        self.headers: list[dict] = []

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        raw = handler.rfile.read(int(handler.headers["Content-Length"]))
        self.headers.append({k.lower(): v for k, v in handler.headers.items()})
        if self.refusals:
            status, code, retry_after, *body = self.refusals.pop(0)  # a body of its own, or not
            extra = {"Retry-After": str(retry_after)} if retry_after is not None else {}
            payload = body[0] if body else {"detail": f"scripted {code}", "code": code}
            return self._send(handler, status, payload, extra)
        if len(raw) > self.max_body_bytes:
            return self._send(handler, 413, {"detail": "body too large", "code": "too_large"})
        body = json.loads(raw)
        self.bodies.append(body)
        items = body.get("symbols") or [s["symbol"] for s in body["series"]]
        if len(items) > self.max_symbols:
            return self._send(handler, 422, {"detail": [
                {"loc": ["body", "symbols"], "msg": f"at most {self.max_symbols}", "type": "x"}]})
        answer = _answer(items, body["horizon"], tuple(body.get("quantiles", ())))
        if self.json_only or ARROW not in handler.headers.get("Accept", ""):
            payload = orjson.dumps(answer_to_json(answer), option=orjson.OPT_SERIALIZE_NUMPY)
            return self._send_raw(handler, 200, payload, "application/json")
        return self._send_raw(handler, 200, answer_to_arrow(answer), ARROW)

    def _send(self, handler, status, body, extra=None):
        send(handler, status, json.dumps(body).encode(), "application/json", extra)

    @staticmethod
    def _send_raw(handler, status, payload, media, extra=None):
        send(handler, status, payload, media, extra)


@pytest.fixture
def stand_in():
    made = []

    def start(**kw):
        service = StandIn(**kw)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the stdlib's name
                service.handle(self)

            def log_message(self, *args):  # quiet
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        made.append(server)
        return service, f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in made:
        server.shutdown()
        server.server_close()


def test_a_5000_symbol_portfolio_goes_in_chunks_within_the_limit(stand_in):
    service, url = stand_in(max_symbols=1000)
    symbols = [f"S{i:04d}" for i in range(5000)]
    out = KronosClient(url, chunk_size=1000).forecast(symbols, 2, quantiles=[0.1, 0.9])
    sizes = [len(b["symbols"]) for b in service.bodies]
    assert sizes == [1000] * 5 and out.requests == 5 and out.retries == 0
    assert list(out.frame["symbol"].unique()) == symbols  # request order, joined
    assert len(out.frame) == 10_000 and out.table.num_rows == 10_000
    close = out.frame.set_index(["symbol", "step"])["close"]
    assert close[("S4321", 2)] == 4322.0 and close[("S0000", 1)] == 0.0
    assert {"close_q0.1", "volume_q0.9"} <= set(out.frame.columns)
    # a chunk above the service's limit is the caller's to fix: raised with the service's words
    with pytest.raises(KronosServiceError) as caught:
        KronosClient(url, chunk_size=1500).forecast(symbols[:1500], 2)
    assert caught.value.status == 422 and caught.value.code == "invalid_request"
    assert "body.symbols: at most 1000" in caught.value.message


def test_a_chunk_refused_as_too_large_is_split_and_the_order_kept(stand_in):
    service, url = stand_in(max_body_bytes=100)
    symbols = [f"S{i:04d}" for i in range(12)]
    out = KronosClient(url, chunk_size=12).forecast(symbols, 1)
    assert list(out.frame["symbol"]) == symbols
    assert max(len(b["symbols"]) for b in service.bodies) < 12  # it took smaller chunks


def test_503_and_429_wait_out_retry_after_then_give_up(stand_in):
    service, url = stand_in(refusals=[(503, "overloaded", 3), (429, "rate_limited", 2)])
    waits: list[float] = []
    client = KronosClient(url, api_key="k1", sleep=waits.append, max_wait_s=60)
    out = client.forecast(["S0001", "U0002"], 1)
    assert waits == [3.0, 2.0] and out.retries == 2 and out.requests == 3
    assert list(out.frame["symbol"].unique()) == ["S0001"]
    # per-symbol errors come beside the frame, not as an exception
    assert out.errors == [{"symbol": "U0002", "code": "unknown_symbol",
                           "message": "unknown symbol 'U0002'"}]
    # the key goes in the header, never in the URL
    assert all(h.get("x-api-key") == "k1" for h in service.headers)
    # bounded: after max_retries waits the refusal is raised with its code
    service.refusals = [(503, "overloaded", 100)] * 3
    waits.clear()
    with pytest.raises(KronosServiceError) as caught:
        KronosClient(url, sleep=waits.append, max_retries=2, max_wait_s=5).forecast(["S0001"], 1)
    assert caught.value.status == 503 and caught.value.code == "overloaded"
    assert waits == [5.0, 5.0]  # a long Retry-After is cut to max_wait_s


def test_other_errors_raise_with_the_service_code_and_message(stand_in):
    service, url = stand_in(refusals=[(401, "unauthorized", None)])
    waits: list[float] = []
    with pytest.raises(KronosServiceError) as caught:
        KronosClient(url, sleep=waits.append).forecast(["S0001"], 1)
    assert (caught.value.status, caught.value.code) == (401, "unauthorized")
    assert "scripted unauthorized" in str(caught.value) and waits == []


def test_a_request_planned_past_its_deadline_raises_the_services_words_and_plan(stand_in):
    """Issue 53: the service's 422 ``deadline_unreachable`` (its own body, from
    ``service.common.errors.DeadlineUnreachable``) is raised at once, not retried, with the
    message as the service wrote it and the plan's figures; ``deadline_s`` is the header."""
    from service.common.errors import DeadlineUnreachable

    words = ("planned 97.9 s (1000 symbols x 32 sample paths x 16 steps on 1 lane(s) of step "
             "loops, cpu), "
             "past this request's deadline of 1 s (X-Kronos-Timeout-S) by more than 1.5x: "
             "refused before any work. To fit in 0.996 s, the rest as asked: at most 9 symbols; "
             "or X-Kronos-Timeout-S: 98 or more (this service allows up to 300 s)")
    plan = {"planned_s": 97.9, "deadline_s": 1.0, "fits": {"symbols": 9, "sample_count": 0,
                                                            "horizon": 0, "timeout_s": 98}}
    body = orjson.loads(orjson.dumps(
        DeadlineUnreachable(words, ["header", "x-kronos-timeout-s"], plan).body()))
    service, url = stand_in(refusals=[(422, "deadline_unreachable", None, body)])
    waits: list[float] = []
    with pytest.raises(KronosServiceError) as caught:
        KronosClient(url, sleep=waits.append, deadline_s=1).forecast(["S0001"], 16)
    err = caught.value
    assert (err.status, err.code) == (422, "deadline_unreachable") and waits == []
    assert err.message == words and words in str(err)  # no "header.x-kronos-timeout-s: " prefix
    assert err.plan == plan and err.plan["fits"]["symbols"] == 9
    assert service.headers[0]["x-kronos-timeout-s"] == "1"
    # other errors carry no plan, and no deadline header unless asked
    service, url = stand_in(max_symbols=1)
    with pytest.raises(KronosServiceError) as caught:
        KronosClient(url).forecast(["S0001", "S0002"], 1, sample_count=1)  # chunk of 2 > 1
    assert caught.value.plan is None and caught.value.code == "invalid_request"
    assert "body.symbols: at most 1" in caught.value.message
    assert "x-kronos-timeout-s" not in service.headers[0]


def test_json_answers_give_the_same_frame_as_arrow_answers(stand_in):
    _, arrow_url = stand_in()
    _, json_url = stand_in(json_only=True)
    symbols = ["S0003", "U0001", "S0007"]
    a = KronosClient(arrow_url).forecast(symbols, 3, quantiles=[0.25, 0.75])
    j = KronosClient(json_url).forecast(symbols, 3, quantiles=[0.25, 0.75])
    pd.testing.assert_frame_equal(a.frame, j.frame)
    assert a.errors == j.errors and a.inputs == j.inputs and a.model == j.model == MODEL


def test_forecast_frame_sends_the_candles_inline(stand_in):
    service, url = stand_in()
    ts = pd.date_range("2024-01-01", periods=4, freq="h")
    df = pd.DataFrame({
        "symbol": ["S0010"] * 4 + ["S0020"] * 4, "timestamps": list(ts) * 2,
        "open": 1.0, "high": 2.0, "low": 0.5, "close": [1.0, 1.1, np.nan, 1.3] * 2,
        "volume": 10.0,
    })
    out = KronosClient(url).forecast_frame(df, 2, seed=3)
    sent = service.bodies[0]
    assert "symbols" not in sent and sent["seed"] == 3 and sent["horizon"] == 2
    assert [s["symbol"] for s in sent["series"]] == ["S0010", "S0020"]
    first = sent["series"][0]["candles"]
    assert first[0] == ["2024-01-01T00:00:00", 1.0, 2.0, 0.5, 1.0, 10.0]
    assert first[2][4] is None  # NaN travels as null; the service names the row
    assert list(out.frame["symbol"].unique()) == ["S0010", "S0020"]
    with pytest.raises(ValueError, match="close"):
        KronosClient(url).forecast_frame(df.drop(columns=["close"]), 2)
