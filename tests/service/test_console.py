"""The web console's data pages in a real headless Chromium, against a real uvicorn and the
real Redis, with an API key and without the admin API: a JSONL upload, paging and a delete, a
search with a filter by keyboard, a compare, and the admin pages saying how to enable them.
Every test ends with no warning or error in the browser log; the module with no 5xx answer.
"""

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from service.console.routes import ASSETS
from service.engine import Engine
from tests.service.conftest import API_KEY, AUTH, fixed_engine, make_settings, serve
from tests.service.console_helpers import (
    Console,
    chromium,
    needs_chromium,
    screenshots_dir,
    server_errors,
)

pytestmark = [pytest.mark.slow, needs_chromium]

ANIMALS = {
    "bird-1": "The parrot repeats every word it hears.",
    "cat-1": "A kitten sleeps on a warm rug.",
    "cat-2": "A cat chases a red laser dot across the floor.",
    "dog-1": "Two dogs run through the snow in the park.",
    "dog-2": "A puppy chews on an old shoe.",
    "horse-1": "A horse grazes in a quiet meadow.",
}
FINANCE = {
    "fin-1": "The central bank raised interest rates again.",
    "fin-2": "Stocks fell sharply after the earnings report.",
    "fin-3": "Bond yields climbed to a ten-year high.",
    "fin-4": "The company reported record quarterly revenue.",
    "fin-5": "Oil prices dropped on weak demand.",
    "fin-6": "Investors moved their savings into gold.",
}


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, engine: Engine) -> Iterator[Console]:
    root = tmp_path_factory.mktemp("console")
    # The API key is required; RANKSERVE_ADMIN_TOKEN is not set.
    with serve(make_settings(root / "var"), loader=fixed_engine(engine)) as server:
        server.wait_ready()
        with chromium(server.url, screenshots_dir(root / "screenshots")) as browser:
            yield Console(server, browser, AUTH)
        assert server_errors(server) == {}


@pytest.fixture(autouse=True)
def _quiet_browser_log(console: Console) -> Iterator[None]:
    yield
    assert console.browser.problems() == []


def test_documents_upload_add_page_and_delete(console: Console, tmp_path: Path):
    browser = console.browser
    browser.open("documents")
    assert "requires an API key" in browser.text("#key-notice")
    assert "No documents" not in browser.text("#documents-status")  # nothing was asked yet
    browser.enter_key("enter-api-key", "api-key", API_KEY)
    browser.wait(lambda: "No documents on this page" in browser.text("#documents-status"))

    upload = tmp_path / "documents.jsonl"
    lines = [
        {"id": doc_id, "text": text, "metadata": {"topic": topic}}
        for topic, docs in (("animals", ANIMALS), ("finance", FINANCE))
        for doc_id, text in docs.items()
    ]
    upload.write_text("".join(json.dumps(line) + "\n" for line in lines))
    browser.by_id("upload-file").send_keys(str(upload))
    browser.click("#upload-submit")
    browser.wait(lambda: "Uploaded 12 of 12 documents" in browser.text("#upload-status"))
    assert browser.by_id("upload-progress").get_attribute("value") == "100"
    browser.wait(lambda: len(browser.rows("documents-table", "data-id")) == 12)

    browser.by_id("doc-id").send_keys("note-1")
    browser.by_id("doc-text").send_keys("A note added from the console.")
    browser.by_id("doc-metadata").send_keys('{"topic": "notes", "pinned": true}')
    browser.click("#add-submit")
    browser.wait(lambda: "Saved note-1" in browser.text("#add-status"))
    stored = console.api("GET", "/documents/note-1").json()
    assert stored["metadata"] == {"topic": "notes", "pinned": True}

    Select(browser.by_id("page-size")).select_by_visible_text("10")
    browser.wait(lambda: len(browser.rows("documents-table", "data-id")) == 10)
    browser.click("#next-page")
    browser.wait(lambda: len(browser.rows("documents-table", "data-id")) == 3)
    assert browser.text("#page-number") == "page 2"
    browser.click("#previous-page")
    browser.wait(lambda: "cat-1" in browser.rows("documents-table", "data-id"))
    browser.click('tr[data-id="cat-1"] summary')
    assert '"topic": "animals"' in browser.text('tr[data-id="cat-1"] pre')

    browser.click('button[aria-label="Delete fin-1"]')
    browser.click("#confirm-ok")
    browser.wait(lambda: "fin-1" not in browser.rows("documents-table", "data-id"))
    assert console.api("GET", "/documents/fin-1").status_code == 404
    browser.check_and_shoot("documents")


def test_search_with_a_filter_by_keyboard(console: Console):
    browser = console.browser
    browser.open("search")
    # Tab from the top: every stop shows a focus ring.
    body = browser.driver.find_element("tag name", "body")
    body.send_keys(Keys.TAB)
    for _ in range(4):
        outline = browser.js("return getComputedStyle(document.activeElement).outlineStyle")
        assert outline == "solid", browser.js("return document.activeElement.outerHTML")
        browser.driver.switch_to.active_element.send_keys(Keys.TAB)

    slider = browser.by_id("lambda")
    browser.js("arguments[0].focus()", slider)
    slider.send_keys(*[Keys.ARROW_RIGHT] * 8)  # 0.10 -> 0.50
    assert browser.text("#lambda-value") == "0.50"
    top_k = browser.by_id("top-k")
    top_k.clear()
    top_k.send_keys("6")
    browser.by_id("add-filter").send_keys(Keys.ENTER)
    browser.driver.switch_to.active_element.send_keys("topic")  # the new key field has focus
    browser.by_id("filter-value-1").send_keys("animals")
    browser.by_id("query").send_keys("an animal sleeping", Keys.ENTER)
    browser.wait(lambda: "6 hits" in browser.text("#search-status"))

    shown = browser.js(
        "return [...document.querySelectorAll('#hits .hit')].map((hit) => ({id: hit.dataset.id,"
        " score: hit.querySelector('.score').textContent,"
        " cosine: hit.querySelector('.cosine').textContent,"
        " move: hit.querySelector('.move').getAttribute('aria-label')}))"
    )
    query = {"query": "an animal sleeping", "top_k": 6, "lambda": 0.5}
    expected = console.api("POST", "/search", json=query | {"filter": {"topic": "animals"}})
    hits = expected.json()["hits"]
    assert [hit["id"] for hit in shown] == [hit["id"] for hit in hits]
    assert {hit["id"] for hit in shown} == set(ANIMALS)  # and no other topic
    assert [hit["score"] for hit in shown] == [f"{hit['score']:.3f}" for hit in hits]
    assert [hit["cosine"] for hit in shown] == [f"{hit['cosine']:.3f}" for hit in hits]
    cosine_order = sorted(hits, key=lambda hit: -hit["cosine"])
    for place, hit in enumerate(shown):
        moved = cosine_order.index(hits[place]) - place
        words = f"up {moved}" if moved > 0 else f"down {-moved}" if moved < 0 else "not"
        assert hit["move"] == f"Eq. 7 moved it {words} from cosine order"
    browser.check_and_shoot("search")


def test_compare_shows_the_scores_and_the_nearest_anchors(console: Console):
    browser = console.browser
    browser.open("compare")
    source = "A man is playing a guitar."
    targets = ["Someone plays an instrument.", "The stock market fell sharply."]
    browser.by_id("source").clear()
    browser.by_id("source").send_keys(source)
    browser.by_id("targets").clear()
    browser.by_id("targets").send_keys("\n".join(targets))
    browser.click("#compare-submit")
    browser.wait(lambda: len(browser.js("return document.querySelectorAll('.anchor-list')")) == 3)

    body = {"source": source, "targets": targets, "lambda": 0.1, "anchors": 5}
    expected = console.api("POST", "/similarity/explain", json=body).json()
    rows = browser.js(
        "return [...document.querySelectorAll('#compare-table tbody tr')].map((row) =>"
        " ['score', 'cosine', 'rank', 'shared-count']"
        ".map((name) => row.querySelector('.' + name + ' .num, .' + name).textContent))"
    )
    assert rows == [
        [
            f"{t['score']:.3f}",
            f"{t['cosine']:.3f}",
            f"{t['rank']:.3f}",
            f"{t['shared_anchors']} of 5",
        ]
        for t in expected["targets"]
    ]
    lists = browser.js(
        "return [...document.querySelectorAll('.anchor-list')].map((list) =>"
        " [...list.querySelectorAll('li')].map((item) =>"
        " [Number(item.dataset.anchor), item.classList.contains('shared')]))"
    )
    source_anchors = [a["anchor"] for a in expected["source"]["nearest_anchors"]]
    target_anchors = {a["anchor"] for t in expected["targets"] for a in t["nearest_anchors"]}
    assert lists[0] == [[anchor, anchor in target_anchors] for anchor in source_anchors]
    for shown, target in zip(lists[1:], expected["targets"], strict=True):
        anchors = [a["anchor"] for a in target["nearest_anchors"]]
        assert shown == [[anchor, anchor in source_anchors] for anchor in anchors]
    browser.check_and_shoot("compare")


def test_without_an_admin_token_the_admin_pages_say_how_to_enable_it(console: Console):
    browser = console.browser
    for page in ("models", "jobs"):
        html = console.api("GET", f"/console/{page}").text
        assert f"static/{page}.js" not in html and "admin-token" not in html
        browser.open(page)
        assert "RANKSERVE_ADMIN_TOKEN" in browser.text("#admin-disabled")
        assert browser.js("return document.querySelectorAll('main form, main table').length") == 0
    browser.check_and_shoot("admin-disabled")


def test_pages_and_assets_come_from_the_package_only(console: Console):
    page = console.api("GET", "/console/search")
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert "connect-src 'self'" in policy and "frame-ancestors 'none'" in policy
    # Nothing from another origin, in the page or in any asset it loads.
    assert re.search(r'(src|href)="(https?:)?//', page.text) is None
    for asset in ASSETS.values():
        if asset.suffix in (".js", ".css"):
            assert re.search(r"https?://", asset.read_text()) is None, asset.name
    redirect = console.api("GET", "/console", follow_redirects=False)
    assert (redirect.status_code, redirect.headers["Location"]) == (307, "console/search")
    served = console.api("GET", "/console/static/common.js")
    assert served.headers["Content-Type"].startswith("text/javascript")
    assert served.text == (ASSETS["common.js"]).read_text()
    # Only the package's files by exact name: a path to any other file is a plain 404.
    for path in ("routes.py", "..%2Froutes.py", "..%2F..%2Fapp.py", "%2e%2e", "nope.js"):
        response = console.api("GET", f"/console/static/{path}")
        assert response.status_code == 404, path
        assert response.json()["error"]["type"] == "not_found"
    assert console.api("GET", "/console/nope").status_code == 404
    assert not any(
        path.startswith("/console") for path in console.api("GET", "/openapi.json").json()["paths"]
    )
