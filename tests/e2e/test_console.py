"""The web console in a real browser: Debian's Chromium driven by Playwright.

One ``jobgate up`` for the module, on rootless Podman with mock GPUs (one 8 GiB GPU of
2 shares: 2 fGPU), and one browser. Each test is a user's errand with many checks:

=====  ===========================================================================
1      sign in (a wrong key is refused on the page); the key is nowhere in the
       browser; a form error shows beside its field; a 0.5 fGPU session launched
       from the dialog is RUNNING in the list with "cuda.shares 0.5 on mock-cuda-0"
2      the guide: three sessions of 1 fGPU from one dialog, two RUNNING and one
       PENDING with its reason; the node's bar shows who holds the GPU; terminating
       one lets the pending one run, seen without a reload
3      an interactive session's terminal opened from its detail page runs a command
4      another user: the admin's session URL is a 404 page, /admin too; a write
       without the page's CSRF token is refused; signing out ends the cookie's access
=====  ===========================================================================

Screenshots of each page go to ``$JOBGATE_TEST_ARTIFACTS/console`` (or the test's tmp).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tomli_w
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright
from up_harness import UpStack

pytestmark = pytest.mark.podman

CHROMIUM = os.environ.get("JOBGATE_CHROMIUM", "/usr/bin/chromium")
BUSYBOX = "localhost/jobgate-busybox:latest"
TERMINAL = "localhost/jobgate-terminal:latest"
WAIT_MS = 90_000
#: what nvidia-smi would show on a real node: the slice this session was given
SHOW_SLICE = 'sh -c "echo slice $JOBGATE_CUDA_SHARES of $CUDA_VISIBLE_DEVICES; exec sleep 600"'
MOCK_GPUS = {
    "devices": [{"kind": "cuda", "model": "Mock GPU 8GB", "memory": "8GiB"}],
    "cuda": {"mode": "fractional", "shares_per_device": 2, "quantum": 0.1},
}


class Console:
    """The stack, its admin key and where screenshots go."""

    def __init__(self, up: UpStack, shots: Path) -> None:
        self.up = up
        self.url = f"http://127.0.0.1:{up.port}"
        self.key = re.search(r'api_key = "([^"]+)"', up.config.read_text()).group(1)  # type: ignore[union-attr]
        self.shots = shots
        self.errors: list[str] = []  # the console's own script errors, in any test

    def api(self, method: str, path: str, key: str | None = None, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key or self.key}"}
        return httpx.request(method, self.url + path, headers=headers, timeout=30, **kw)

    def shot(self, page: Page, name: str) -> None:
        page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, podman_socket: str) -> Iterator[Console]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    tmp = tmp_path_factory.mktemp("console")
    mock = tmp / "gpus.toml"
    mock.write_text(tomli_w.dumps(MOCK_GPUS))
    up = UpStack(
        tmp,
        runtime="podman",
        env={
            "JOBGATE_PODMAN_SOCKET": podman_socket,
            "JOBGATE_MOCK_DEVICES": str(mock),
            "JOBGATE_ACCELERATORS": "mock",
        },
    )
    up.start(timeout=180)
    artefacts = os.environ.get("JOBGATE_TEST_ARTIFACTS")
    shots = Path(artefacts) / "console" if artefacts else tmp / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    stack = Console(up, shots)
    try:
        # the registry lists images with apps: the dialog offers it by name and version
        body = {"service_ports": "terminal:http:7681"}
        stack.api("PUT", f"/v1/images/{TERMINAL}", json=body).raise_for_status()
        yield stack
    finally:
        live = stack.api("GET", "/v1/sessions?all=true&status=RUNNING&status=PENDING").json()
        for s in live["items"]:
            stack.api("DELETE", f"/v1/sessions/{s['id']}?force=true")
        up.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium's sandbox refuses root
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def admin(console: Console, browser: Browser) -> Iterator[Page]:
    """The admin's tab, signed in by test 1 and used by the others."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.on("dialog", lambda d: d.accept())  # "Terminate …?" confirmations
    page.on("pageerror", lambda e: console.errors.append(str(e)))
    try:
        yield page
    finally:
        context.close()


@pytest.fixture(autouse=True)
def _no_script_errors(console: Console) -> Iterator[None]:
    yield
    assert console.errors == [], "the console's script failed"


def sign_in(page: Page, console: Console, key: str) -> None:
    page.goto(console.url + "/")
    expect(page).to_have_url(console.url + "/sign-in")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(console.url + "/")


def launch(page: Page, **fields: str) -> None:
    """Fill the launch dialog (by its labels) and submit it."""
    page.get_by_role("button", name="Launch…").click()
    dialog = page.locator("dialog#launch")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_label("Accelerator")).to_have_value("cuda.shares")
    if fields.get("type") == "interactive":
        dialog.get_by_label("interactive").check()
    if "image" in fields:
        dialog.get_by_label("Image", exact=True).select_option(fields["image"])
        expect(dialog.get_by_label("Version")).to_have_value("latest")
    for label, key in (
        ("Name", "name"),
        ("or an image reference", "image_ref"),
        ("Command", "command"),
        ("Amount", "gpu"),
        ("Number of sessions", "count"),
    ):
        if key in fields:
            dialog.get_by_label(re.compile(f"^{label}")).fill(fields[key])
    dialog.get_by_role("button", name="Launch", exact=True).click()


def row(page: Page, name: str) -> Any:
    return page.locator(f'#sessions tbody tr[data-name="{name}"]')


def test_sign_in_launch_half_a_gpu_and_see_its_share(console: Console, admin: Page) -> None:
    page = admin
    page.goto(console.url + "/")
    expect(page).to_have_url(console.url + "/sign-in")  # GET / is the console, not a 404
    console.shot(page, "sign-in")
    page.get_by_label("API key").fill("jg_not-a-key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#key-error")).to_contain_text("unknown")
    sign_in(page, console, console.key)
    expect(page.get_by_role("heading", name="Sessions")).to_be_visible()

    # the key is not kept anywhere the page's scripts can read, nor in the URL
    stored = page.evaluate(
        "() => document.cookie + JSON.stringify(localStorage) + JSON.stringify(sessionStorage)"
    )
    assert console.key not in stored
    assert console.key not in page.url
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "jobgate_console"]
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    assert console.key not in cookie["value"]

    # keyboard only: Tab reaches the Launch button, Enter opens the dialog, Escape closes it
    for _ in range(12):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.id") == "open-launch":
            break
    page.keyboard.press("Enter")
    expect(page.locator("dialog#launch")).to_be_visible()
    expect(page.locator("dialog#launch input[name=type]").first).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("dialog#launch")).to_be_hidden()

    # a field error shows beside its field (the API's RFC 7807 answer), nothing launched
    launch(page, name="not a name!", image_ref=BUSYBOX, command="sleep 600")
    error = page.locator('[data-field="name"] .error')
    expect(error).to_contain_text("starting with a letter or digit")  # the rule in words
    expect(page.locator("#l-name")).to_have_attribute("aria-invalid", "true")
    console.shot(page, "launch-error")
    page.get_by_role("button", name="Cancel").click()
    assert console.api("GET", "/v1/sessions").json()["items"] == []

    name = f"half-{uuid.uuid4().hex[:6]}"
    launch(page, name=name, image_ref=BUSYBOX, command="sleep 600", gpu="0.5")
    expect(row(page, name).locator(".status")).to_have_text("RUNNING", timeout=WAIT_MS)
    expect(row(page, name).locator(".alloc")).to_contain_text("cuda.shares 0.5 on mock-cuda-0")
    console.shot(page, "sessions-half-gpu")

    # the live list keeps a keyboard user's place across its refreshes
    row(page, name).get_by_role("checkbox").focus()
    for _ in range(2):  # two refreshes of the list
        with page.expect_response(lambda r: "/v1/sessions?" in r.url):
            pass
    assert page.evaluate("() => document.activeElement.closest('tr')?.dataset.name") == name

    # terminate it from the list (checkbox + button), as the next test needs the GPU
    row(page, name).get_by_role("checkbox").check()
    page.get_by_role("button", name=re.compile("Terminate selected")).click()
    expect(row(page, name).locator(".status")).to_have_text(
        re.compile("TERMINATED|SUCCEEDED|FAILED"), timeout=WAIT_MS
    )


def test_three_sessions_of_one_fgpu_two_run_one_waits(console: Console, admin: Page) -> None:
    page = admin
    page.goto(console.url + "/")
    page.evaluate("() => { window.notReloaded = true; }")
    launch(page, name="guide", image_ref=BUSYBOX, command=SHOW_SLICE, gpu="1", count="3")
    names = ["guide-0", "guide-1", "guide-2"]  # one array request: NAME-INDEX
    for name in names:
        expect(row(page, name)).to_have_count(1)
    first = page.request.get(console.url + "/v1/sessions?name=guide-0").json()["items"][0]
    assert (first["array_index"], first["array_size"]) == (0, 3)
    assert first["env"]["JOBGATE_ARRAY_INDEX"] == "0"
    running = page.locator('#sessions tbody tr[data-name^="guide-"][data-status="RUNNING"]')
    pending = page.locator('#sessions tbody tr[data-name^="guide-"][data-status="PENDING"]')
    expect(running).to_have_count(2, timeout=WAIT_MS)
    expect(pending).to_have_count(1)
    expect(pending.locator(".reason")).to_contain_text("no node fits", timeout=WAIT_MS)
    expect(running.first.locator(".alloc")).to_contain_text("cuda.shares 1 on mock-cuda-0")
    waiting = pending.get_attribute("data-name")
    console.shot(page, "sessions-guide")

    # the node's GPU bar names the two holders
    nodes = page.context.new_page()
    nodes.goto(console.url + "/nodes")
    device = nodes.locator("li.device")
    expect(device).to_contain_text("mock-cuda-0")
    holders = [n for n in names if n != waiting]
    for holder in holders:
        expect(device.locator(".meter-text")).to_contain_text(holder)
    expect(device.locator(".meter-text")).to_contain_text("2 / 2")
    track = device.locator(".meter-track").bounding_box()
    parts = [p.bounding_box() for p in device.locator(".meter-part").all()]
    assert track is not None
    assert len(parts) == 2
    assert all(p is not None and abs(p["width"] - track["width"] / 2) < 3 for p in parts)
    expect(nodes.get_by_role("button", name=re.compile("^drain "))).to_be_enabled()  # admins
    console.shot(nodes, "nodes")
    nodes.close()

    # a detail page: history with reasons, containers, logs
    detail = page.context.new_page()
    detail.on("dialog", lambda d: d.accept())
    session_id = row(page, holders[0]).get_attribute("data-id")
    detail.goto(f"{console.url}/sessions/{session_id}")
    expect(detail.locator("#s-status")).to_have_text("RUNNING")
    expect(detail.locator("#s-history")).to_contain_text("PENDING")
    expect(detail.locator("#s-kernels")).to_contain_text("cuda.shares 1 on mock-cuda-0")
    expect(detail.locator("#s-logs")).to_contain_text("slice 1 of mock-cuda-0")  # live, SSE
    console.shot(detail, "session-detail")
    detail.get_by_role("button", name="Terminate").click()
    expect(detail.locator("#s-status")).to_have_text(re.compile("TERMINAT|SUCCEEDED|FAILED"))
    detail.close()

    # the list, never reloaded, shows the waiting one running
    expect(row(page, waiting).locator(".status")).to_have_text("RUNNING", timeout=WAIT_MS)
    assert page.evaluate("() => window.notReloaded") is True


def test_terminal_app_from_the_detail_page(console: Console, admin: Page) -> None:
    page = admin
    page.goto(console.url + "/")
    name = f"term-{uuid.uuid4().hex[:6]}"
    launch(page, type="interactive", name=name, image="localhost/jobgate-terminal")
    expect(row(page, name).locator(".status")).to_have_text("RUNNING", timeout=WAIT_MS)
    row(page, name).get_by_role("link").click()
    open_terminal = page.get_by_role("button", name="Open terminal")
    expect(open_terminal).to_be_enabled()
    with page.context.expect_page() as opened:
        open_terminal.click()
    terminal = opened.value
    terminal.wait_for_load_state()
    assert "jobgate_token" not in terminal.url  # the one-time link became a cookie
    screen = terminal.locator(".xterm-rows")
    for _ in range(60):  # the app listens a few seconds after the container starts
        if screen.count():
            break
        terminal.wait_for_timeout(1000)
        terminal.reload()
    expect(screen).to_be_visible()
    # the shell's prompt: its WebSocket is up (keys typed before that are lost)
    expect(screen).to_contain_text(re.compile(r"[#$]"), timeout=WAIT_MS)
    for attempt in range(3):
        terminal.locator(".xterm").click()
        terminal.keyboard.type("echo answer-$((6*7))\n")
        try:
            expect(screen).to_contain_text("answer-42", timeout=5000)
            break
        except AssertionError:
            if attempt == 2:
                raise
    console.shot(terminal, "terminal")
    terminal.close()
    console.shot(page, "session-interactive")


def test_other_users_csrf_and_sign_out(console: Console, browser: Browser, admin: Page) -> None:
    created = console.api("POST", "/v1/users", json={"name": "bob"})
    assert created.status_code == 201
    bob_key = console.api("POST", "/v1/users/bob/keys", json={"name": "t"}).json()["key"]
    mine = console.api("GET", "/v1/sessions?limit=1").json()["items"][0]["id"]

    context: BrowserContext = browser.new_context(viewport={"width": 420, "height": 800})
    context.set_default_timeout(WAIT_MS)
    try:
        page = context.new_page()
        sign_in(page, console, bob_key)
        expect(page.get_by_role("link", name="Admin")).to_have_count(0)
        console.shot(page, "sessions-narrow")
        response = page.goto(f"{console.url}/sessions/{mine}")
        assert response is not None
        assert response.status == 404
        expect(page.get_by_role("heading", name="No such session")).to_be_visible()
        console.shot(page, "not-found")
        response = page.goto(f"{console.url}/admin")
        assert response is not None
        assert response.status == 404

        # a cookie-authenticated write without the page's token is refused
        status = page.evaluate(
            """async () => (await fetch('/v1/sessions', {method: 'POST',
                 headers: {'Content-Type': 'application/json'},
                 body: JSON.stringify({command: ['true']})})).status"""
        )
        assert status == 403
        assert console.api("GET", "/v1/sessions", key=bob_key).json()["items"] == []

        (cookie,) = [c for c in context.cookies() if c["name"] == "jobgate_console"]
        jar = {"jobgate_console": cookie["value"]}
        assert httpx.get(f"{console.url}/v1/sessions", cookies=jar).status_code == 200
        page.goto(console.url + "/")
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(console.url + "/sign-in")
        assert httpx.get(f"{console.url}/v1/sessions", cookies=jar).status_code == 401
        assert httpx.get(f"{console.url}/", cookies=jar).status_code == 303
    finally:
        context.close()

    # an admin cordons the node and takes it back, from its card
    admin.goto(console.url + "/nodes")
    admin.get_by_role("button", name=re.compile("^cordon ")).click()
    expect(admin.locator("section.node h2")).to_contain_text("cordoned")
    expect(admin.get_by_role("button", name=re.compile("^cordon "))).to_be_disabled()
    admin.get_by_role("button", name=re.compile("^uncordon ")).click()
    expect(admin.get_by_role("button", name=re.compile("^uncordon "))).to_be_disabled()
    assert console.api("GET", "/v1/nodes").json()["items"][0]["admin_state"] == "ready"

    admin.goto(console.url + "/admin")
    expect(admin.locator("#a-users")).to_contain_text("bob")
    expect(admin.locator("#a-groups")).to_contain_text("default")
    expect(admin.locator("#a-policies")).to_have_text("none")
    expect(admin.locator("#a-audit")).to_contain_text("nodes-cordon")  # through the console
    console.shot(admin, "admin")
    # the artefacts: a screenshot of each page
    taken = {p.stem for p in console.shots.glob("*.png")}
    assert {"sign-in", "sessions-guide", "nodes", "session-detail", "terminal", "admin"} <= taken
