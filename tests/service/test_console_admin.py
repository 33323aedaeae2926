"""The web console's admin pages in a real headless Chromium, against a real uvicorn, the real
Redis and a real RQ worker: a retrain started from the console with tiny parameters until its
progress shows 100 %, the new version's diagnostics charts, a rollback, and no admin data
anywhere once the token is forgotten. Every test ends with no warning or error in the browser
log; the module with no 5xx answer.
"""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.support.ui import Select

from service.engine import Engine
from tests.polling import wait_until
from tests.service.conftest import fixed_engine, serve
from tests.service.console_helpers import (
    Console,
    chromium,
    needs_chromium,
    screenshots_dir,
    server_errors,
)
from tests.worker.conftest import (
    ADMIN_TOKEN,
    TINY_PARAMS,
    OpsEnv,
    make_ops_env,
    write_tiny_data,
)

pytestmark = [pytest.mark.slow, needs_chromium]

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture(scope="module")
def ops(
    tmp_path_factory: pytest.TempPathFactory, engine: Engine, anchor_cache: Path
) -> Iterator[OpsEnv]:
    root = tmp_path_factory.mktemp("console-admin")
    with make_ops_env(root, write_tiny_data(root / "data"), anchor_cache) as env:
        # Started first: it loads while the server and the browser start.
        env.start_worker()
        yield env


@pytest.fixture(scope="module")
def console(ops: OpsEnv, engine: Engine) -> Iterator[Console]:
    with serve(ops.settings, loader=fixed_engine(engine)) as server:
        server.wait_ready()
        with chromium(server.url, screenshots_dir(ops.root / "screenshots")) as browser:
            yield Console(server, browser, ADMIN)
        assert server_errors(server) == {}


@pytest.fixture(autouse=True)
def _quiet_browser_log(console: Console) -> Iterator[None]:
    yield
    assert console.browser.problems() == []


def test_a_retrain_started_from_the_console_reaches_100_percent(console: Console, ops: OpsEnv):
    browser = console.browser
    browser.open("jobs")
    assert browser.by_id("admin-content").is_displayed() is False
    browser.enter_key("enter-admin-key", "admin-token", ADMIN_TOKEN)
    browser.wait(lambda: browser.by_id("retrain-form").is_displayed())
    browser.js("window.sameDocument = true")  # gone if anything reloads the page

    Select(browser.by_id("method")).select_by_visible_text("simcse")
    Select(browser.by_id("recipe")).select_by_visible_text("quick")
    browser.by_id("params").clear()
    browser.by_id("params").send_keys(json.dumps(TINY_PARAMS))
    browser.click('label[for="force"]')
    browser.click("#retrain-submit")
    browser.wait(lambda: "is queued" in browser.text("#retrain-status"))

    seen: list[tuple[str, str]] = []

    def finished() -> bool:
        row = browser.js(
            "const row = document.querySelector('#jobs-table tbody tr');"
            "return row && [row.dataset.status, row.querySelector('.phase').textContent,"
            " row.querySelector('.percent').textContent]"
        )
        if row and (not seen or seen[-1] != (row[0], row[1])):
            seen.append((row[0], row[1]))
        return bool(row) and row[0] in ("finished", "failed") and row

    try:
        status, _, percent = browser.wait(finished, 300)
    except TimeoutException:
        pytest.fail(f"never ended: {seen} {browser.text('#retrain-status')} {browser.problems()}")
    assert status == "finished", ops.log("worker")[-3000:]
    assert percent == "100 %"
    assert browser.js("return document.querySelector('#jobs-table progress').value") == 100
    assert browser.js("return window.sameDocument") is True
    # Followed live: the row went through more than one state without a reload.
    assert len(seen) >= 2, seen
    assert "promoted" in browser.text("#jobs-table tbody tr")
    browser.check_and_shoot("jobs")


def test_models_diagnostics_and_a_rollback(console: Console):
    browser = console.browser
    versions = {v["version"]: v for v in console.api("GET", "/admin/models").json()["versions"]}
    trained = next(v for v in versions.values() if v["parent"])["version"]
    base_version = next(v for v in versions.values() if not v["parent"])["version"]
    wait_until(
        lambda: console.api("GET", "/ready").json()["model_version"] == trained, 120, "no swap"
    )

    browser.open("models")
    serving = "tr[data-replica] .serving"
    browser.wait(lambda: browser.text(serving) == trained, 30, "the replica row never showed it")
    assert browser.rows("versions-table", "data-version") == [trained, base_version]
    assert "active" in browser.text(f'tr[data-version="{trained}"] th')
    assert "promoted (forced)" in browser.text(f'tr[data-version="{trained}"]')
    assert "cosine" in browser.text(f'tr[data-version="{trained}"] .metrics')
    browser.click(f'button[aria-label="Diagnostics of {trained}"]')
    browser.wait(
        lambda: browser.js(
            "const images = [...document.querySelectorAll('#charts img')];"
            "return images.length >= 3 && images.every((i) => i.complete && i.naturalWidth > 0)"
        ),
        message="the charts never loaded",
    )
    browser.check_and_shoot("models")

    browser.click(f'button[aria-label="Roll back to {base_version}"]')
    assert base_version in browser.text("#confirm-message")
    browser.click("#confirm-ok")
    browser.wait(lambda: "active" in browser.text(f'tr[data-version="{base_version}"] th'))
    browser.wait(
        lambda: browser.text(serving) == base_version, 120, "the replica never rolled back"
    )
    assert console.api("GET", "/ready").json()["model_version"] == base_version
    # The rollback is on the record, newest first.
    assert "activated through the admin API" in browser.text("#history li")


def test_no_admin_data_without_the_token(console: Console):
    browser = console.browser
    models = console.api("GET", "/admin/models").json()
    jobs = console.api("GET", "/admin/jobs").json()["jobs"]
    secrets = [
        ADMIN_TOKEN,
        *(v["version"] for v in models["versions"]),
        *models["replicas"],
        *(job["id"] for job in jobs),
    ]
    with console.server.client() as anonymous:
        for page in ("models", "jobs"):
            html = anonymous.get(f"/console/{page}").text
            assert [secret for secret in secrets if secret in html] == []

    browser.open("models")
    browser.wait(lambda: len(browser.rows("versions-table", "data-version")) == 2)
    browser.click("#keys-button")
    browser.click("#keys-forget")
    # The dialog's close event, which forgets the keys, runs after the click returns: opening
    # another page before it would keep the token.
    browser.wait(lambda: "admin token is needed" in browser.text("#key-notice"))
    for page in ("models", "jobs"):
        browser.open(page)
        assert "admin token is needed" in browser.text("#key-notice")
        shown = browser.js("return document.body.innerText")
        assert [secret for secret in secrets if secret in shown] == []
