"""Headless Chromium for the browser tests: Debian's ``chromium`` driven by Selenium through
Debian's ``chromium-driver`` (scripts/ci-services.sh installs both). Nothing downloads a browser
or a driver: both paths are given, and Selenium Manager is told to stay offline. A missing
browser skips the test with the package names; in CI (``CI=true``) it fails instead."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

PACKAGES = "apt-get install -y chromium chromium-driver (scripts/ci-services.sh does it in CI)"
FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--disable-dev-shm-usage", "--window-size=1400,1000",
)


def _missing(what: str) -> None:
    msg = f"{what} not found: {PACKAGES}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(msg)
    pytest.skip(msg)


def start_browser(profile: Path) -> Any:
    """A headless Chromium with a fresh profile folder (``profile``)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None:
        _missing("the Debian package `chromium` (/usr/bin/chromium)")
    if driver is None:
        _missing("the Debian package `chromium-driver` (/usr/bin/chromedriver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("the Python package selenium (pip install -e '.[dev]')")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never fetch a browser or a driver
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """``check()``'s first truthy value within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # noqa: BLE001 - an element not there yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


# Counts the pixels of every canvas under ``root`` that are not the background, and those near
# each of the given colours (r, g, b), from the canvases' own bitmaps.
PIXELS_JS = """
const [root, colours, tol] = arguments;
const out = {canvases: 0, painted: 0, near: colours.map(() => 0)};
for (const c of document.querySelectorAll(root + ' canvas')) {
  if (!c.width || !c.height) continue;
  out.canvases += 1;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] === 0) continue;
    const r = d[i], g = d[i + 1], b = d[i + 2];
    if (r < 250 || g < 250 || b < 250) out.painted += 1;
    colours.forEach(([cr, cg, cb], k) => {
      const near = Math.abs(r - cr) <= tol && Math.abs(g - cg) <= tol && Math.abs(b - cb) <= tol;
      if (near) out.near[k] += 1;
    });
  }
}
return out;
"""


def canvas_pixels(
    driver: Any, root: str, colours: list[tuple[int, int, int]], tol: int = 12
) -> dict:
    """``{canvases, painted, near: [count per colour]}`` of the canvases under ``root``."""
    return driver.execute_script(PIXELS_JS, root, [list(c) for c in colours], tol)


def shots_dir(tmp_path_factory: Any) -> Path:
    """Where screenshots go: ``$OUT/ui-screenshots`` when ``OUT`` is set, else a temp folder."""
    out = os.environ.get("OUT")
    folder = Path(out) / "ui-screenshots" if out else tmp_path_factory.mktemp("ui-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
