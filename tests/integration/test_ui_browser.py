"""The forecast explorer (``/ui``) and ``/docs`` in a real browser: Debian's Chromium, headless,
driven by Selenium, against the integration session's service (bundled model, sample store).

- 20 symbols forecast from the portfolio view: 20 rows, sorted by the column clicked;
- the symbol view draws a chart whose canvas pixels hold the fan's band colours;
- ``as_of`` in the past draws the actual candles that followed (their colour on the canvas);
- 1,000 symbols: the table is drawn within 2 s of the answer (``performance.now()`` in the
  page) with only the rows in sight in the DOM, and it scrolls;
- ``/docs`` renders the operations (the ``POST /v1/forecast`` block), not Swagger's error.

Screenshots of the views go to ``$OUT/ui-screenshots`` (or a temp folder). A wrong key's error
and the key scopes are in test_ui_keys.py (a service with keys on)."""

from __future__ import annotations

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


def _column(driver, index: int) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#portfolio-body tr.data')]"
        ".map(r => r.children[arguments[0]].textContent)", index)


def _numbers(texts: list[str]) -> list[float]:
    return [float(t.replace("+", "")) for t in texts if t not in ("–", "")]


def test_portfolio_sorts_and_symbol_view_draws_the_fan(browser, live_service, shots):
    symbols = live_service.store.symbols()[100:120]
    _open(browser, live_service)
    _forecast_list(browser, symbols, SMALL)
    assert browser.find_element("id", "error").get_attribute("hidden") is not None
    rows = browser.find_elements("css selector", "#portfolio-body tr.data")
    assert len(rows) == 20
    assert sorted(_column(browser, 0)) == sorted(symbols)
    header = browser.find_element("css selector", 'th[data-key="change"]')
    header.find_element("tag name", "button").click()
    assert header.get_attribute("aria-sort") == "ascending"
    up = _numbers(_column(browser, 2))
    assert len(up) == 20 and up == sorted(up)
    header.find_element("tag name", "button").click()
    assert header.get_attribute("aria-sort") == "descending"
    down = _numbers(_column(browser, 2))
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
    browser.save_screenshot(str(shots / "accuracy.png"))
    browser.find_element("id", "tab-model").click()
    assert "max_context" in browser.find_element("id", "model-info").text


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


def test_a_thousand_rows_render_within_two_seconds_and_scroll(browser, live_service, shots):
    symbols = live_service.store.symbols()[:1000]
    _open(browser, live_service)
    _forecast_list(browser, symbols, {"horizon": "1", "sample-count": "1", "lookback": "16"},
                   timeout=540)
    ms = browser.execute_script("return window.kronosUi.lastRenderMs")
    print(f"1,000-row table drawn {ms:.1f} ms after the answer arrived (performance.now())")
    assert ms < 2000
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
