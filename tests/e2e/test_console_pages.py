"""The console's endpoint, data-folder and template pages in a real browser.

The stack, the browser and the helpers are test_console.py's (one ``jobgate up`` on
rootless Podman for this module, Debian's Chromium through Playwright). One admin tab,
signed in once, does a user's errands in order:

=====  ===========================================================================
1      data folders: create one from the list, upload a file into it and into a
       subdirectory, browse in and out, download the file (same bytes)
2      the launch dialog mounts that folder by name: the session reads the uploaded
       file and writes its answer next to it, seen on the folder's page
3      a template run from its page: a form from its parameters (a required one
       refused empty, a default filled in), landing on the session, whose logs show
       the values
4      an endpoint (started when the module starts): ready replicas and its URL in
       the list; on its page a token created (shown once, it calls the URL) and
       revoked (the URL refuses it), a scale to 2; unknown pages are 404 pages
=====  ===========================================================================

Screenshots of each page go to ``$JOBGATE_TEST_ARTIFACTS/console``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect
from test_console import (  # the module's stack and browser: the same fixtures
    BUSYBOX,
    WAIT_MS,
    Console,
    _no_script_errors,
    browser,
    console,
    launch,
    row,
    sign_in,
)
from waiting import until_sync

pytestmark = pytest.mark.podman
__all__ = ["_no_script_errors", "browser", "console"]  # fixtures, used by name

HTTPBENCH = "localhost/jobgate-httpbench:latest"
CSV = b"a,b\n1,2\n3,4\n"


@pytest.fixture(scope="module")
def endpoint(console: Console) -> str:
    """``hello`` (one replica of the model-server stand-in), started before the tests
    so that it is ready by the time test 4 looks at it."""
    body = {"name": "hello", "image": HTTPBENCH, "port": 8000, "probe": {"path": "/ping"}}
    console.api("POST", "/v1/endpoints", json=body).raise_for_status()
    return "hello"


@pytest.fixture(scope="module")
def page(console: Console, browser: Browser, endpoint: str) -> Iterator[Page]:
    """The admin's tab, signed in once for the module."""
    context = browser.new_context(viewport={"width": 1280, "height": 860}, accept_downloads=True)
    context.set_default_timeout(WAIT_MS)
    tab = context.new_page()
    tab.on("dialog", lambda d: d.accept())  # "Revoke token …?"
    tab.on("pageerror", lambda e: console.errors.append(str(e)))
    sign_in(tab, console, console.key)
    try:
        yield tab
    finally:
        context.close()


def test_data_folders_create_upload_browse_download(
    console: Console, page: Page, tmp_path: Path
) -> None:
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Data folders").click()
    expect(page).to_have_url(console.url + "/folders")
    page.get_by_label("New folder").fill("ds")
    page.get_by_label("Usage").select_option("data")
    page.get_by_role("button", name="Create", exact=True).click()
    listed = page.locator('#folders tbody tr[data-name="ds"]')
    expect(listed).to_contain_text("data")
    expect(listed).to_contain_text("wd")  # the owner's permission
    console.shot(page, "folders")

    listed.get_by_role("link", name="ds").click()
    expect(page.get_by_role("heading", name="ds")).to_be_visible()
    expect(page.locator("#files")).to_contain_text("Empty")
    upload = page.get_by_label("Upload to this directory")
    upload.set_input_files({"name": "train.csv", "mimeType": "text/csv", "buffer": CSV})
    page.get_by_role("button", name="Upload", exact=True).click()
    expect(page.locator("#up-progress")).to_have_text("Uploaded 1 file(s).")
    expect(page.locator('#files tr[data-path="train.csv"]')).to_contain_text("12 B")

    # a subdirectory (made with the API), browsed into, a file uploaded there, and back
    mkdir = console.api("POST", "/v1/folders/ds/mkdir", json={"path": "raw"})
    assert mkdir.status_code == 204
    page.reload()
    page.get_by_role("link", name="raw/").click()
    expect(page).to_have_url(re.compile(r"\?path=raw$"))
    expect(page.locator("#crumbs")).to_have_text("ds / raw")
    upload.set_input_files({"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hi\n"})
    page.get_by_role("button", name="Upload", exact=True).click()
    expect(page.locator('#files tr[data-path="raw/notes.txt"]')).to_be_visible()
    got = console.api("GET", "/v1/folders/ds/files/raw/notes.txt")
    assert got.content == b"hi\n"
    console.shot(page, "folder")
    page.locator("#crumbs").get_by_role("link", name="ds").click()
    expect(page.locator('#files tr[data-path="train.csv"]')).to_be_visible()

    # download: the browser saves the same bytes under the file's name
    with page.expect_download() as downloading:
        page.get_by_role("link", name="Download train.csv").click()
    download = downloading.value
    assert download.suggested_filename == "train.csv"
    saved = tmp_path / "train.csv"
    download.save_as(saved)
    assert saved.read_bytes() == CSV


def test_the_dialog_mounts_a_data_folder_by_name(console: Console, page: Page) -> None:
    page.goto(console.url + "/")
    page.get_by_role("button", name="Launch…").click()
    dialog = page.locator("dialog#launch")
    picker = dialog.locator('[data-folder="ds"]')
    picker.get_by_role("checkbox", name="ds", exact=True).check()
    expect(dialog.get_by_label("/host/path", exact=False)).to_have_count(0)  # no host paths
    console.shot(page, "launch-folders")
    page.get_by_role("button", name="Cancel").click()
    count = "wc -l < /home/work/ds/train.csv > /home/work/ds/lines.txt"
    launch(page, name="count-lines", image_ref=BUSYBOX, command=f"sh -c '{count}'")
    expect(row(page, "count-lines").locator(".status")).to_have_text("SUCCEEDED", timeout=WAIT_MS)
    made = console.api("GET", "/v1/sessions?name=count-lines").json()["items"][0]
    assert [f["name"] for f in made["folders"]] == ["ds"]

    page.goto(console.url + "/folders")
    page.locator('#folders tr[data-name="ds"]').get_by_role("link", name="ds").click()
    expect(page.locator('#files tr[data-path="lines.txt"]')).to_be_visible()
    assert console.api("GET", "/v1/folders/ds/files/lines.txt").text.strip() == "3"


def test_run_a_template_with_parameters(console: Console, page: Page) -> None:
    template = {
        "name": "greet",
        "description": "says hello",
        "params": [{"name": "who"}, {"name": "times", "default": "2"}],
        "session": {
            "image": BUSYBOX,
            "command": ["sh", "-c", 'echo "hello $JOBGATE_PARAM_WHO x$JOBGATE_PARAM_TIMES"'],
        },
    }
    console.api("POST", "/v1/templates", json=template).raise_for_status()
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Templates").click()
    listed = page.locator('#templates tr[data-name="greet"]')
    expect(listed).to_contain_text("who, times=2")
    expect(listed).to_contain_text("says hello")
    console.shot(page, "templates")
    listed.get_by_role("link", name="Run greet").click()
    expect(page.get_by_role("heading", name="Run greet")).to_be_visible()
    expect(page.get_by_label(re.compile("^times"))).to_have_value("2")
    console.shot(page, "template")

    page.get_by_role("button", name="Run", exact=True).click()  # "who" has no default: required
    expect(page.get_by_label(re.compile("^who"))).to_have_attribute("aria-invalid", "true")
    assert console.api("GET", "/v1/sessions?name=greeting").json()["items"] == []
    page.get_by_label(re.compile("^who")).fill("world")
    page.get_by_label("Session name").fill("greeting")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/sessions/[0-9a-f-]+$"))
    expect(page.locator("#s-title")).to_have_text("greeting")
    expect(page.locator("#s-logs")).to_contain_text("hello world x2", timeout=WAIT_MS)


def test_an_endpoint_its_url_tokens_and_scale(console: Console, page: Page, endpoint: str) -> None:
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Endpoints").click()
    listed = page.locator(f'#endpoints tr[data-name="{endpoint}"]')
    url = f"http://127.0.0.1:{console.up.proxy_port}/e/{endpoint}/"
    expect(listed.locator(".replicas")).to_have_text("1 / 1", timeout=WAIT_MS)
    expect(listed.get_by_role("link", name=url)).to_be_visible()
    expect(listed.locator(".status")).to_have_text("HEALTHY")
    console.shot(page, "endpoints")

    listed.get_by_role("link", name=endpoint, exact=True).click()
    expect(page.locator("#e-url")).to_have_text(url)
    expect(page.locator("#e-replicas-table tbody tr")).to_have_count(1)
    expect(page.locator("#e-replicas-table .ready")).to_have_text("ready")
    assert httpx.get(url + "ping", timeout=30).status_code == 401  # a token is needed

    page.get_by_label("Token name").fill("ci")
    page.get_by_role("button", name="Create token (shown once)").click()
    token = page.locator("#token-value").inner_text()
    assert token
    expect(page.locator('#e-tokens tr:has-text("ci")')).to_contain_text("never")
    calls = httpx.get(url + "ping", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert calls.status_code == 200

    page.get_by_role("button", name="Revoke ci").click()
    expect(page.get_by_role("button", name="Revoke ci")).to_have_count(0)
    expect(page.locator("#token-value")).to_have_count(0)  # a revoked token is not shown on
    until_sync(
        lambda: (
            httpx.get(url + "ping", headers={"Authorization": f"Bearer {token}"}).status_code == 401
        ),
        timeout=10,
        interval=0.25,
        what="the revoked token refused",
    )
    console.shot(page, "endpoint")

    page.get_by_label("Replicas (fixed)").fill("2")
    page.get_by_role("button", name="Scale", exact=True).click()
    expect(page.locator("#e-facts")).to_contain_text("fixed at 2")
    expect(page.locator("#e-replicas-table tbody tr")).to_have_count(2)

    # pages that are not there: the console's 404 page, not the API's problem+json
    response = page.goto(console.url + "/endpoints/nope")
    assert response is not None
    assert response.status == 404
    expect(page.get_by_role("heading", name="No such endpoint")).to_be_visible()
    response = page.goto(console.url + "/no-such-page")
    assert response is not None
    assert response.status == 404
    expect(page.get_by_role("heading", name="Nothing here")).to_be_visible()
    taken = {p.stem for p in console.shots.glob("*.png")}
    assert {"folders", "folder", "launch-folders", "templates", "template"} <= taken
    assert {"endpoints", "endpoint"} <= taken
