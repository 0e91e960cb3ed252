"""API keys and the forecast explorer, on a service with keys on: a second Serve app in the
integration session's Ray instance (one predictor replica, one gateway, no ledger), mounted at
``/uikeys`` of the same HTTP proxy and deleted at the end of this module (it holds the session's
spare logical CPU, which test_ledger_service_week.py's app needs after it).

- ``/ui`` and its assets are served without a key; the API calls the page makes are checked as
  any client's: 401 without a key, 403 without the route's scope (``candles`` its own), checked
  below the route prefix;
- in Chromium, a wrong key shows the service's 401 in the page (not a blank page), and the right
  key then forecasts;
- ``KronosClient`` with a rate-limited key waits out the 429's ``Retry-After`` and gets every
  chunk answered.
"""

from __future__ import annotations

import time

import httpx
import pytest
from browser_helpers import shots_dir, start_browser, wait_for

pytestmark = pytest.mark.integration

APP = "uikeys"
VIEWER, NO_CANDLES, LIMITED = "viewer-key-1", "no-candles-key-2", "limited-key-3"


@pytest.fixture(scope="module")
def keyed(live_service, tmp_path_factory):
    from ray import serve

    from service.app import build_app
    from service.auth import hash_key

    root = tmp_path_factory.mktemp("uikeys")
    keys = "\n".join([
        f"{hash_key(VIEWER)} viewer forecast,models,symbols,candles -",
        f"{hash_key(NO_CANDLES)} nocandles forecast,models,symbols -",
        # 0.25 series/s, a 1 s burst: a 4-symbol request leaves 3.75 series of debt, so the next
        # one within 15 s is refused (429) with the seconds to wait
        f"{hash_key(LIMITED)} limited forecast 0.25",
    ])
    settings = live_service.settings.model_copy(update=dict(
        app_name=APP, num_replicas=1, replica_cpus=1, gateway_replicas=1, ledger_dir="off",
        metrics_dir=str(root / "metrics"), log_dir=str(root / "logs"), api_keys=keys,
        rate_burst_s=1.0,
    ))
    serve.run(build_app(settings), name=APP, route_prefix=f"/{APP}", blocking=False)
    url = f"{live_service.url}/{APP}"
    client = httpx.Client(base_url=url, timeout=300)
    try:
        wait_for(lambda: client.get("/readyz").status_code == 200, 300, "the keyed service")
        yield url, client
    finally:
        client.close()
        serve.delete(APP)


def test_the_page_is_open_and_its_api_calls_are_checked(keyed, live_service):
    url, client = keyed
    page = client.get("/ui")
    assert page.status_code == 200 and "ui/assets/app.js" in page.text
    for asset in ("app.js", "app.css", "lightweight-charts.js"):
        assert client.get(f"/ui/assets/{asset}").status_code == 200, asset
    r = client.get("/v1/models")
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
    assert client.get("/v1/models", headers={"X-API-Key": VIEWER}).status_code == 200
    symbol = live_service.store.symbols()[3]
    # the scope is checked below the /uikeys prefix: 403 for a key without `candles`
    r = client.get("/v1/candles", params={"symbol": symbol}, headers={"X-API-Key": NO_CANDLES})
    assert r.status_code == 403 and r.json()["code"] == "forbidden"
    r = client.get("/v1/candles", params={"symbol": symbol, "before": 5},
                   headers={"X-API-Key": VIEWER})
    assert r.status_code == 200 and len(r.json()["history"]["timestamps"]) == 5
    r = client.get("/v1/accuracy", headers={"X-API-Key": VIEWER})
    assert r.status_code == 403  # no accuracy scope


def test_a_wrong_key_shows_the_error_in_the_page(keyed, live_service, tmp_path_factory):
    from selenium.webdriver.common.keys import Keys

    url, _ = keyed
    shots = shots_dir(tmp_path_factory)
    driver = start_browser(tmp_path_factory.mktemp("chromium-keys"))
    try:
        driver.get(f"{url}/ui")
        # keys on: the page's first call gets 401 and the page asks for a key
        wait_for(lambda: driver.find_element("id", "key-dialog").get_attribute("open") is not None,
                 60, "the key dialog")
        driver.find_element("id", "key-input").send_keys("not-a-key")
        driver.find_element("id", "key-save").click()
        reason = wait_for(
            lambda: "not accepted" in (t := driver.find_element("id", "key-reason").text) and t,
            60, "the refusal of the wrong key",
        )
        assert "401" in reason and "unauthorized" in reason
        driver.find_element("id", "key-input").send_keys(Keys.ESCAPE)
        wait_for(lambda: driver.find_element("id", "key-dialog").get_attribute("open") is None,
                 10, "the dialog closed")
        symbols = live_service.store.symbols()[10:12]
        driver.find_element("id", "symbol-list").send_keys(" ".join(symbols))
        for k, v in {"horizon": "2", "sample-count": "2", "lookback": "32"}.items():
            el = driver.find_element("id", k)
            el.clear()
            el.send_keys(v)
        driver.find_element("id", "forecast-button").click()
        error = wait_for(
            lambda: (e := driver.find_element("id", "error")).is_displayed() and e.text, 60,
            "the error in the page",
        )
        assert "401" in error and "unauthorized" in error and "API key" in error
        assert driver.find_element("id", "portfolio-form").is_displayed()  # not a blank page
        driver.save_screenshot(str(shots / "wrong-key.png"))
        # the right key: the same page forecasts (its calls carry the key in a header)
        driver.find_element("id", "key-input").clear()
        driver.find_element("id", "key-input").send_keys(VIEWER)
        driver.find_element("id", "key-save").click()
        wait_for(lambda: "sha256" in driver.find_element("id", "model-line").text, 60,
                 "the model line with the key")
        driver.find_element("id", "forecast-button").click()
        wait_for(lambda: driver.execute_script("return window.kronosUi.lastRenderMs") is not None,
                 300, "the keyed forecast")
        assert len(driver.find_elements("css selector", "#portfolio-body tr.data")) == 2
        assert not driver.find_element("id", "error").is_displayed()
        assert VIEWER not in driver.current_url  # kept in sessionStorage, never in a URL
        assert driver.execute_script("return sessionStorage.getItem('kronos.apiKey')") == VIEWER
    finally:
        driver.quit()


def test_the_client_waits_out_retry_after_of_a_rate_limited_key(keyed, live_service):
    from kronos_core.client import KronosClient, KronosServiceError

    url, _ = keyed
    symbols = live_service.store.symbols()[20:28]
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    client = KronosClient(url, api_key=LIMITED, chunk_size=4, sleep=sleep)
    out = client.forecast(symbols, 1, lookback=16)
    # the first chunk takes the bucket (0.25 series) to -3.75; the second is refused with a 429
    # whose Retry-After (whole seconds, up to 15) the client waits out, then it is answered
    assert out.retries >= 1 and waits and 1 <= waits[0] <= 15 and waits[0] == int(waits[0])
    assert list(out.frame["symbol"].unique()) == symbols and not out.errors
    with pytest.raises(KronosServiceError) as caught:
        KronosClient(url).forecast(symbols[:1], 1)
    assert caught.value.status == 401 and caught.value.code == "unauthorized"
