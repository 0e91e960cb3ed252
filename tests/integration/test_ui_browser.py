"""The forecast explorer (``/ui``) and ``/docs`` in a real browser: Debian's Chromium, headless,
driven by Selenium, against the integration session's service (bundled model, sample store).

- 20 symbols forecast from the portfolio view: 20 rows, sorted by the column clicked;
- the table shows the as-of candle and the forecast's dates, and with the page's defaults (the
  model's sample paths and point forecast, seed 0) its numbers and ranking are those of
  ``POST /v1/forecast`` with the same fields; a row with a ``stale`` warning is marked stale;
- the symbol view draws a chart whose canvas pixels hold the fan's band colours, opened on the
  last 3 x horizon + 60 candles;
- the accuracy view's CRPS by day groups by UTC calendar day (a forecast made just after
  midnight UTC is under its own day);
- ``as_of`` in the past draws the actual candles that followed (their colour on the canvas);
- 1,000 symbols: the table is drawn within 2 s of the answer (``performance.now()`` in the
  page) with only the rows in sight in the DOM, and it scrolls;
- ``/docs`` renders the operations (the ``POST /v1/forecast`` block), not Swagger's error.

Screenshots of the views go to ``$OUT/ui-screenshots`` (or a temp folder). A wrong key's error
and the key scopes are in test_ui_keys.py (a service with keys on)."""

from __future__ import annotations

import copy
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from browser_helpers import canvas_pixels, shots_dir, start_browser, wait_for

pytestmark = pytest.mark.integration

BAND80 = (215, 226, 243)  # rgba(31, 95, 191, .18) over white (app.js, BandPrimitive)
ACTUAL = (255, 162, 25)  # rgba(255, 152, 0, .9) over white: the actual candles' body
SMALL = {"horizon": "3", "sample-count": "4", "lookback": "48"}


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = start_browser(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return shots_dir(tmp_path_factory)


def _set(driver, element_id: str, value: str) -> None:
    el = driver.find_element("id", element_id)
    el.clear()
    if value:
        el.send_keys(value)


def _open(driver, live_service) -> None:
    driver.get(f"{live_service.url}/ui")
    wait_for(lambda: "sha256" in driver.find_element("id", "model-line").text, 60, "model line")


def _forecast_list(driver, symbols: list[str], fields: dict, timeout: float = 300) -> None:
    driver.find_element("css selector", 'input[name="source"][value="list"]').click()
    _set(driver, "symbol-list", " ".join(symbols))
    for k, v in fields.items():
        _set(driver, k, v)
    before = driver.execute_script("return window.kronosUi.lastAnswer")
    driver.find_element("id", "forecast-button").click()
    wait_for(lambda: driver.execute_script("return window.kronosUi.lastAnswer") != before
             and driver.execute_script("return window.kronosUi.lastRenderMs") is not None,
             timeout, "the portfolio answer")


def _column(driver, key: str) -> list[str]:
    """The drawn rows' texts in the column whose header has ``data-key`` = ``key``."""
    return driver.execute_script(
        "const i = [...document.querySelectorAll('#portfolio-table thead th')]"
        ".findIndex(th => th.dataset.key === arguments[0]);"
        "return [...document.querySelectorAll('#portfolio-body tr.data')]"
        ".map(r => r.children[i].textContent)", key)


def _short(stamp: str) -> str:
    """A wall-clock stamp as the table shows it: the date at midnight, else date and minute."""
    day, _, time = stamp.partition("T")
    return day if not time or time.startswith("00:00:00") else f"{day} {time[:5]}"


def _numbers(texts: list[str]) -> list[float]:
    return [float(t.replace("+", "")) for t in texts if t not in ("–", "")]


def test_portfolio_sorts_and_symbol_view_draws_the_fan(browser, live_service, shots):
    symbols = live_service.store.symbols()[100:120]
    _open(browser, live_service)
    _forecast_list(browser, symbols, SMALL)
    assert browser.find_element("id", "error").get_attribute("hidden") is not None
    rows = browser.find_elements("css selector", "#portfolio-body tr.data")
    assert len(rows) == 20
    assert [s.split()[0] for s in sorted(_column(browser, "symbol"))] == sorted(symbols)
    header = browser.find_element("css selector", 'th[data-key="change"]')
    header.find_element("tag name", "button").click()
    assert header.get_attribute("aria-sort") == "ascending"
    up = _numbers(_column(browser, "change"))
    assert len(up) == 20 and up == sorted(up)
    header.find_element("tag name", "button").click()
    assert header.get_attribute("aria-sort") == "descending"
    down = _numbers(_column(browser, "change"))
    assert down == sorted(up, reverse=True)
    browser.save_screenshot(str(shots / "portfolio.png"))

    # the symbol view, from the first row
    first = browser.find_element("css selector", "#portfolio-body tr.data")
    symbol = first.get_attribute("data-symbol")
    browser.find_element("id", "tab-symbol").click()
    browser.find_element("id", "show-paths").click()  # sample paths on request
    browser.find_element("id", "tab-portfolio").click()
    first.click()
    info = wait_for(lambda: browser.execute_script("return window.kronosUi.chartInfo"), 300,
                    "the symbol chart")
    assert info["symbol"] == symbol and info["horizon"] == 3 and info["lookback"] == 48
    assert info["history"] > info["lookback"] and info["paths"] == 4
    # opened on the last 3 x horizon + 60 candles (and the forecast); the rest scrolls in
    zoom = 3 * 3 + 60
    assert info["history"] > zoom and info["visibleFrom"] == info["history"] - zoom
    shown = browser.execute_script(
        "return window.kronosUi.chart.timeScale().getVisibleLogicalRange()")
    assert abs(shown["from"] - (info["history"] - zoom)) < 1, shown
    px = wait_for(lambda: (p := canvas_pixels(browser, "#chart", [BAND80]))["near"][0] > 50 and p,
                  30, "the fan's 80% band on the canvas")
    assert px["canvases"] >= 2 and px["painted"] > 2000, px  # candles, lines, axes: not blank
    browser.save_screenshot(str(shots / "symbol.png"))

    browser.find_element("id", "tab-accuracy").click()
    text = wait_for(lambda: (t := browser.find_element("id", "accuracy-body").text) and t, 120,
                    "the accuracy view")
    # the session's ledger scores in the background: figures (the coverage and CRPS table, and
    # the CRPS by day), or the empty state saying why
    scored = "Coverage of the bands against nominal, CRPS" in text and "CRPS over time" in text
    assert "Model SHA-256" in text and (scored or "Nothing scored yet" in text), text[:500]
    if scored:  # the newest row is today's UTC day (either side of a midnight during the wait)
        days = browser.execute_script(
            "return [...document.querySelectorAll('#crps-by-day tbody tr')]"
            ".map(r => r.children[0].textContent)")
        today = {(datetime.now(UTC) - timedelta(seconds=s)).date().isoformat() for s in (0, 180)}
        assert len(days) == 7 and days[-1] in today, days
    browser.save_screenshot(str(shots / "accuracy.png"))
    browser.find_element("id", "tab-model").click()
    assert "max_context" in browser.find_element("id", "model-info").text


def _rest_change(forecast: dict, point: str) -> float:
    """The table's change %: the model's point forecast's last close over the last close."""
    close = (forecast["quantiles"]["0.5"]["close"] if point == "median"
             else forecast["mean"]["close"])[-1]
    return (close / forecast["last_close"] - 1) * 100


def test_defaults_are_the_models_seeded_and_agree_with_rest_and_the_dates_show(
        browser, live_service, shots):
    symbols = live_service.store.symbols()[40:46]
    sampling = live_service.client.get("/v1/models").json()["models"][0]["sampling"]
    _open(browser, live_service)
    # the page's defaults: the model's sample paths, a fixed seed, no lookback
    paths = browser.find_element("id", "sample-count").get_attribute("value")
    assert paths == str(sampling["sample_count"])
    assert browser.find_element("id", "seed").get_attribute("value") == "0"
    header = browser.find_element("id", "change-header").text
    assert header.lower().startswith(sampling["point"])
    _forecast_list(browser, symbols, {"horizon": "5", "lookback": ""})
    assert browser.find_element("id", "error").get_attribute("hidden") is not None
    # the same request through REST: the fields the user set, the rest left to the service
    rest = live_service.client.post("/v1/forecast", json={
        "symbols": symbols, "horizon": 5, "seed": 0, "quantiles": [0.1, 0.25, 0.5, 0.75, 0.9],
        "summary": True}).json()
    assert not rest["errors"] and len(rest["forecasts"]) == len(symbols)
    by_symbol = {f["symbol"]: f for f in rest["forecasts"]}
    rows = {r["symbol"]: r for r in browser.execute_script("return window.kronosUi.rows")}
    assert set(rows) == set(symbols)
    for symbol, f in by_symbol.items():
        r = rows[symbol]
        expected = _rest_change(f, sampling["point"])
        assert r["change"] == pytest.approx(expected, rel=1e-4, abs=1e-6), symbol
        assert r["p_up"] == pytest.approx(f["summary"]["p_up"], abs=1e-9), symbol
        assert r["last_candle"] == f["last_timestamp"]
        assert (r["first_step"], r["last_step"]) == (f["timestamps"][0], f["timestamps"][-1])
    # the table's texts: the same numbers, ranked the same
    browser.find_element("css selector", 'th[data-key="change"] button').click()
    shown = dict(zip([s.split()[0] for s in _column(browser, "symbol")],
                     _numbers(_column(browser, "change")), strict=True))
    for symbol, value in shown.items():
        assert value == pytest.approx(_rest_change(by_symbol[symbol], sampling["point"]),
                                      abs=0.0051), symbol
    ranked = sorted(symbols, key=lambda s: _rest_change(by_symbol[s], sampling["point"]))
    assert list(shown) == ranked
    # the dates: per row, and above the table when every row shares them
    f0 = rest["forecasts"][0]
    assert set(_column(browser, "last_candle")) == {_short(f["last_timestamp"])
                                                    for f in rest["forecasts"]}
    assert _column(browser, "first_step")[0] == (
        f"{_short(f0['timestamps'][0])} → {_short(f0['timestamps'][-1])}")
    # the portfolio's as-of: its most common last candle (ties: the latest)
    counts = Counter(f["last_timestamp"] for f in rest["forecasts"])
    as_of = max(counts, key=lambda t: (counts[t], t))
    dates = browser.find_element("id", "portfolio-dates").text
    assert f"As of candle {_short(as_of)}" in dates, dates
    if len({(f["timestamps"][0], f["timestamps"][-1]) for f in rest["forecasts"]}) == 1:
        assert f"forecast {_short(f0['timestamps'][0])} → {_short(f0['timestamps'][-1])}" in dates
    else:
        assert "forecast dates differ per row" in dates, dates
    browser.save_screenshot(str(shots / "portfolio-dates.png"))

    # a row the service calls stale (its `stale` warning, as issue 52's service check words it)
    # is marked, with its own last candle; drawn from the REST answer with one row made stale
    answer = copy.deepcopy(rest)
    stale = answer["forecasts"][2]
    stale["last_timestamp"] = "2001-02-05T00:00:00"
    stale["timestamps"] = [f"2001-02-{d:02d}T00:00:00" for d in range(6, 11)]
    stale["warnings"] = stale["warnings"] + [{
        "code": "stale", "message": "last candle 2001-02-05 00:00:00: 10 sessions missed up to "
        "the portfolio's as-of"}]
    browser.execute_async_script(
        "window.kronosUi.fn.showPortfolio(arguments[0]).then(arguments[1])", answer)
    marked = browser.find_elements("css selector", "#portfolio-body tr.data.stale")
    assert [m.get_attribute("data-symbol") for m in marked] == [stale["symbol"]]
    assert "stale" in marked[0].find_element("css selector", ".badge.stale").text
    cells = dict(zip([s.split()[0] for s in _column(browser, "symbol")],
                     _column(browser, "last_candle"), strict=True))
    assert cells[stale["symbol"]] == "2001-02-05"
    assert cells[f0["symbol"]] == _short(f0["last_timestamp"])
    dates = browser.find_element("id", "portfolio-dates").text
    # the portfolio's as-of is still the others' most common last candle, not the stale one's
    counts = Counter(f["last_timestamp"] for f in answer["forecasts"])
    as_of = max(counts, key=lambda t: (counts[t], t))
    assert as_of != stale["last_timestamp"] and f"As of candle {_short(as_of)}" in dates, dates
    assert "forecast dates differ per row" in dates and stale["symbol"] in dates, dates
    browser.save_screenshot(str(shots / "portfolio-stale.png"))


STALE_APP = "uistale"
REAL = Path(__import__("kronos_core.data", fromlist=["x"]).__file__).parent / "real"
STALE_END = "2013-03-01"  # GOOG's last candle; SPX cut there too, HALTED 10 sessions earlier


def _real(file: str) -> pd.DataFrame:
    df = pd.read_csv(REAL / file, parse_dates=["timestamps"])
    df["amount"] = df["volume"] * (df["open"] + df["high"] + df["low"] + df["close"]) / 4
    return df[df["timestamps"] <= pd.Timestamp(STALE_END)]


@pytest.fixture(scope="module")
def stale_service(live_service, tmp_path_factory):
    """A second Serve app beside the session's (its own store, one replica), mounted at
    /uistale: GOOG and SPX end on 2013-03-01, HALTED (SPX's candles) 10 sessions earlier."""
    from ray import serve

    from kronos_core.data.store import KlineStore
    from service.app import build_app

    root = tmp_path_factory.mktemp("ui-stale")
    store = KlineStore(root / "store")
    spx = _real("sp500_daily.csv")
    frames = {"GOOG": _real("goog_daily.csv"), "SPX": spx, "HALTED": spx.iloc[:-10]}
    for symbol, df in frames.items():
        store.write(symbol, df, frequency="1d", timezone="America/New_York",
                    extra_metadata={"exchange": "XNYS"})
    settings = live_service.settings.model_copy(update=dict(
        app_name=STALE_APP, store_dir=str(root / "store"), ledger_dir=str(root / "ledger"),
        num_replicas=1, replica_cpus=1, gateway_replicas=1, metrics_dir=str(root / "metrics")))
    serve.run(build_app(settings), name=STALE_APP, route_prefix=f"/{STALE_APP}", blocking=False)
    url = f"{live_service.url}/{STALE_APP}"
    try:
        wait_for(lambda: live_service.client.get(f"{url}/readyz").status_code == 200, 300,
                 "the stale-store service ready")
        yield url, frames
    finally:
        serve.delete(STALE_APP)


def test_a_symbol_whose_history_ends_earlier_is_shown_stale(browser, live_service,
                                                          stale_service, shots):
    url, frames = stale_service
    browser.get(f"{url}/ui")
    wait_for(lambda: "sha256" in browser.find_element("id", "model-line").text, 60, "model line")
    _forecast_list(browser, list(frames), {"horizon": "5"})
    assert browser.find_element("id", "error").get_attribute("hidden") is not None
    marked = browser.find_elements("css selector", "#portfolio-body tr.data.stale")
    assert [m.get_attribute("data-symbol") for m in marked] == ["HALTED"]
    halted_last = frames["HALTED"]["timestamps"].iloc[-1].strftime("%Y-%m-%d")
    cells = dict(zip([s.split()[0] for s in _column(browser, "symbol")],
                     _column(browser, "last_candle"), strict=True))
    assert cells == {"GOOG": STALE_END, "SPX": STALE_END, "HALTED": halted_last}
    badge = marked[0].find_element("css selector", ".badge.stale")
    assert halted_last in badge.get_attribute("title")  # the service's message names it
    dates = browser.find_element("id", "portfolio-dates").text
    assert f"As of candle {STALE_END}" in dates and "HALTED" in dates, dates
    browser.save_screenshot(str(shots / "portfolio-stale-real.png"))
    # left out on request (exclude_stale): an error row, still marked stale, and counted
    browser.find_element("id", "exclude-stale").click()
    _forecast_list(browser, list(frames), {"horizon": "5"})
    failed = browser.find_elements("css selector", "#portfolio-body tr.data.failed")
    assert [f.get_attribute("data-symbol") for f in failed] == ["HALTED"]
    assert "stale" in (failed[0].get_attribute("class") or "").split()
    assert "stale" in failed[0].text
    dates = browser.find_element("id", "portfolio-dates").text
    assert "1 stale symbol(s) left out: HALTED" in dates, dates


# forecasts planted with a made-at time and a CRPS; "now" is 09:00 UTC on 2026-12-07
MADE = [("2026-12-05T12:00:00Z", 0.1), ("2026-12-06T10:00:00Z", 0.4),
        ("2026-12-06T23:59:30Z", 0.2), ("2026-12-07T00:00:30Z", 0.5)]
CUMULATIVE_JS = """
const [made, now, done] = arguments;
// what GET v1/accuracy?since= answers over the planted forecasts: count and mean CRPS
const cumulative = async (since) => {
  const kept = made.filter(([t]) => Date.parse(t) >= Date.parse(since));
  const n = kept.length;
  return {n, crps: n ? kept.reduce((a, [, c]) => a + c, 0) / n : null};
};
window.kronosUi.fn.crpsByDay(Date.parse(now), 3, cumulative).then(done);
"""


def test_crps_by_day_groups_by_utc_calendar_day(browser, live_service):
    _open(browser, live_service)
    rows = browser.execute_async_script(CUMULATIVE_JS, MADE, "2026-12-07T09:00:00Z")
    got = [(r["day"], r["scored"], None if r["crps"] is None else round(r["crps"], 9))
           for r in rows]
    # made 30 s after midnight UTC: under its own day, 2026-12-07, not the 24 hours before now
    assert got == [("2026-12-05", 1, 0.1), ("2026-12-06", 2, 0.3), ("2026-12-07", 1, 0.5)]
    # a minute after midnight the day has begun: today's row holds only what was made since
    rows = browser.execute_async_script(CUMULATIVE_JS, MADE, "2026-12-07T00:01:00Z")
    assert [(r["day"], r["scored"]) for r in rows] == [
        ("2026-12-05", 1), ("2026-12-06", 2), ("2026-12-07", 1)]


def test_as_of_in_the_past_draws_the_actual_candles(browser, live_service, shots):
    symbol = live_service.store.symbols()[7]
    ts = live_service.store.read(symbol)["timestamps"]
    as_of = ts.iloc[-12].strftime("%Y-%m-%dT%H:%M:%S")
    _open(browser, live_service)
    browser.find_element("id", "tab-symbol").click()
    for k, v in {"symbol-input": symbol, "symbol-horizon": "6", "symbol-samples": "4",
                 "symbol-lookback": "64", "symbol-as-of": as_of}.items():
        _set(browser, k, v)
    browser.find_element("id", "symbol-button").click()
    info = wait_for(lambda: browser.execute_script("return window.kronosUi.chartInfo"), 300,
                    "the symbol chart")
    assert info["symbol"] == symbol and info["actual"] == 6 and info["paths"] == 0
    px = wait_for(
        lambda: (p := canvas_pixels(browser, "#chart", [BAND80, ACTUAL]))["near"][1] > 20 and p,
        30, "the actual candles on the canvas",
    )
    assert px["near"][0] > 50, px  # the fan is drawn under them
    notes = browser.find_element("id", "symbol-notes").text
    assert "6 actual candle(s)" in notes
    browser.save_screenshot(str(shots / "symbol-as-of.png"))


def test_a_thousand_rows_render_and_scroll(browser, live_service, shots):
    symbols = live_service.store.symbols()[:1000]
    _open(browser, live_service)
    _forecast_list(browser, symbols, {"horizon": "1", "sample-count": "1", "lookback": "16"},
                   timeout=540)
    ms = browser.execute_script("return window.kronosUi.lastRenderMs")
    # a figure, not a limit: tests do not time (issue 52); the draw is bounded by the virtual
    # scrolling checked below, whatever the machine's load
    print(f"1,000-row table drawn {ms:.1f} ms after the answer arrived (performance.now())")
    assert browser.execute_script("return window.kronosUi.view.length") == 1000
    drawn = browser.find_elements("css selector", "#portfolio-body tr.data")
    assert 10 < len(drawn) < 200  # virtual scrolling: the rows in sight, not a thousand
    assert drawn[0].get_attribute("data-symbol") == symbols[0]
    browser.execute_script(
        "const s = document.getElementById('table-scroll'); s.scrollTop = s.scrollHeight;"
    )
    wait_for(lambda: browser.execute_script(
        "const r = [...document.querySelectorAll('#portfolio-body tr.data')];"
        "return r.length && r[r.length - 1].dataset.symbol") == symbols[-1], 10,
        "the last row after scrolling to the end")
    browser.save_screenshot(str(shots / "portfolio-1000.png"))


def test_a_forecast_planned_past_its_deadline_shows_the_services_message(browser, live_service,
                                                                         shots):
    """Issue 53: the deadline field (sent as ``X-Kronos-Timeout-S``) at 1 s for 200 symbols at 100
    paths and 48 steps (minutes of work on two CPU replicas): the service refuses at once, and the
    page shows its sentence (the estimate, the deadline, what would fit) in the error box; the
    table keeps the last answer. Cleared, the field sends no header and a small forecast runs."""
    symbols = live_service.store.symbols()[:200]
    _open(browser, live_service)
    before = browser.execute_script("return window.kronosUi.lastAnswer")
    browser.find_element("css selector", 'input[name="source"][value="list"]').click()
    _set(browser, "symbol-list", " ".join(symbols))
    for k, v in {"horizon": "48", "sample-count": "100", "lookback": "", "deadline": "1"}.items():
        _set(browser, k, v)
    browser.find_element("id", "forecast-button").click()
    box = browser.find_element("id", "error")
    wait_for(lambda: box.get_attribute("hidden") is None and box.text, 120, "the error box")
    text = box.text
    assert text.startswith("The service answered 422 deadline_unreachable: planned "), text
    for words in ("200 symbols x 100 sample paths x 48 steps", "deadline of 1 s",
                  "refused before any work", "X-Kronos-Timeout-S"):
        assert words in text, (words, text)
    assert "header.x-kronos-timeout-s" not in text  # the sentence as the service wrote it
    status = browser.find_element("id", "portfolio-status").text
    assert status.startswith("refused before any work"), status
    assert browser.execute_script("return window.kronosUi.lastAnswer") == before  # nothing drawn
    browser.save_screenshot(str(shots / "portfolio-deadline.png"))
    _forecast_list(browser, symbols[:3], {**SMALL, "deadline": ""})
    assert browser.find_element("id", "error").get_attribute("hidden") is not None
    assert "planned" in browser.find_element("id", "portfolio-status").text


def test_docs_renders_the_operations(browser, live_service, shots):
    browser.get(f"{live_service.url}/docs")
    block = wait_for(
        lambda: browser.find_element(
            "css selector", '.opblock-post .opblock-summary-path[data-path="/v1/forecast"]'),
        60, "the POST /v1/forecast block",
    )
    assert block.is_displayed()
    assert "Unable to render this definition" not in browser.page_source
    browser.save_screenshot(str(shots / "docs.png"))
