"""Headless Chromium through Selenium for the console tests (tests/service/test_console*.py).

Debian's `chromium` and `chromium-driver` (.ci/run installs both). The browser log is read at
every level; screenshots are whole pages at a desktop and a phone width, the phone through
Chrome's device emulation so that the page's viewport meta applies as on a real phone. They go
to $RANKSERVE_SCREENSHOTS_DIR when set (docs/console is refreshed that way), else to a
temporary folder.
"""

import base64
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from tests.service.conftest import Server

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
DESKTOP = (1280, 800)
PHONE = (390, 844)
MAX_SHOT_HEIGHT = 2400  # a page longer than this is cut: the docs need its top
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="chromium is not installed (.ci/run installs Debian's chromium, chromium-driver)",
)

# Every form control must have a label a screen reader announces (a <label>, or aria-label).
UNLABELLED = """
return [...document.querySelectorAll('input, select, textarea')]
  .filter((c) => c.type !== 'hidden' && c.offsetParent !== null)
  .filter((c) => !c.labels.length && !c.getAttribute('aria-label'))
  .map((c) => c.outerHTML);
"""


@dataclass
class Browser:
    driver: webdriver.Chrome
    base_url: str
    shots: Path

    def open(self, page: str) -> None:
        self.driver.get(f"{self.base_url}/console/{page}")

    def by_id(self, element_id: str) -> WebElement:
        return self.driver.find_element(By.ID, element_id)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait(self, condition: Callable[[], Any], timeout: float = 30, message: str = "") -> Any:
        return WebDriverWait(
            self.driver,
            timeout,
            poll_frequency=0.1,
            ignored_exceptions=[StaleElementReferenceException],
        ).until(lambda _: condition(), message)

    def click(self, css: str, timeout: float = 30) -> None:
        """Click the element once it is there; pages that refresh themselves replace their
        rows, so a stale element is looked up again."""

        def clicked() -> bool:
            self.driver.find_element(By.CSS_SELECTOR, css).click()
            return True

        self.wait(clicked, timeout, f"could not click {css}")

    def enter_key(self, button: str, field: str, secret: str) -> None:
        """Open the keys dialog with `button` and save `secret` in `field`, by keyboard."""
        self.click(f"#{button}")
        self.wait(lambda: self.by_id("keys-dialog").get_attribute("open") is not None)
        self.by_id(field).send_keys(secret, Keys.ENTER)  # Enter submits the dialog: Save

    def rows(self, table: str, attribute: str) -> list[str]:
        """`attribute` of each body row of the table with id `table`."""
        return self.js(
            "return [...document.querySelectorAll(`#${arguments[0]} tbody tr`)]"
            ".map((row) => row.getAttribute(arguments[1]))",
            table,
            attribute,
        )

    def text(self, css: str) -> str:
        return self.js("return document.querySelector(arguments[0])?.innerText ?? ''", css)

    def problems(self) -> list[dict[str, Any]]:
        """Browser log entries at WARNING or above since the last call (reading drains it)."""
        return [e for e in self.driver.get_log("browser") if e["level"] in ("WARNING", "SEVERE")]

    def viewport(self, size: tuple[int, int], *, mobile: bool) -> None:
        width, height = size
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
        )
        # Two frames: the new layout is done before anything is measured or captured.
        self.driver.execute_async_script(
            "const done = arguments[0];"
            "requestAnimationFrame(() => requestAnimationFrame(() => done()));"
        )

    def _capture(self, path: Path, width: int) -> None:
        height = min(self.js("return document.documentElement.scrollHeight"), MAX_SHOT_HEIGHT)
        shot = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
            },
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    def check_and_shoot(self, name: str) -> None:
        """The page as it is: every control labelled, nothing wider than a phone, and a
        screenshot at each width (`<name>-desktop.png`, `<name>-phone.png`)."""
        assert self.js(UNLABELLED) == []
        self._capture(self.shots / f"{name}-desktop.png", DESKTOP[0])
        self.viewport(PHONE, mobile=True)
        try:
            overflow = self.js("return document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{name} is {overflow}px wider than a {PHONE[0]}px phone"
            self._capture(self.shots / f"{name}-phone.png", PHONE[0])
        finally:
            self.viewport(DESKTOP, mobile=False)


@contextmanager
def chromium(base_url: str, shots: Path) -> Iterator[Browser]:
    options = webdriver.ChromeOptions()
    assert CHROMIUM is not None and CHROMEDRIVER is not None
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        # Root in CI containers: Chromium's sandbox needs user namespaces it does not get.
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    browser = Browser(driver, base_url, shots)
    try:
        browser.viewport(DESKTOP, mobile=False)
        yield browser
    finally:
        driver.quit()


@dataclass
class Console:
    server: Server
    browser: Browser
    headers: dict[str, str]  # what the tests' own API calls send

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with self.server.client(headers=self.headers) as client:
            return client.request(method, path, **kwargs)


def screenshots_dir(default: Path) -> Path:
    shots = Path(os.environ.get("RANKSERVE_SCREENSHOTS_DIR") or default)
    shots.mkdir(parents=True, exist_ok=True)
    return shots


def server_errors(server: Server) -> dict[str, float]:
    """5xx answers by method, route and status; /ready's 503 while the model loads is what it
    is for."""
    with server.client() as client:
        text = client.get("/metrics").text
    errors = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "rankserve_requests_total" and labels["status"].startswith("5"):
                errors[f"{labels['method']} {labels['route']} {labels['status']}"] = sample.value
    errors.pop("GET /ready 503", None)
    return errors
