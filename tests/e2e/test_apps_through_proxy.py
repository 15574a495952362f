"""Interactive apps end to end: `jobgate up` on rootless Podman, real Jupyter, the real proxy.

One stack for the module (starting it takes a while): a user opens JupyterLab with the
one-time link, runs code in a kernel over the kernel WebSocket, uses a web terminal; a
stranger cannot get in, nor can a process on the node that goes to Jupyter's or the
terminal's published port without the session's app secret (which no output shows); an
ended session's link says so; an idle session is ended.
"""

from __future__ import annotations

import base64
import json
import select
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets
from up_harness import UpStack
from waiting import until_sync
from websockets.typing import Origin

from contract.apps import BASIC_USER
from contract.tokens import app_secret

pytestmark = pytest.mark.podman

JUPYTER = "localhost/jobgate-jupyter:latest"
TERMINAL = "localhost/jobgate-terminal:latest"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, podman_socket: str) -> Iterator[UpStack]:
    stack = UpStack(
        tmp_path_factory.mktemp("apps"),
        runtime="podman",
        env={
            "JOBGATE_PODMAN_SOCKET": podman_socket,
            "JOBGATE_IDLE_TIMEOUT_S": "15",  # every interactive session here, unless busy
            "JOBGATE_PROXY_ACTIVITY_INTERVAL": "1",
            "JOBGATE_TICK_INTERVAL_S": "1",
        },
    )
    stack.start(timeout=180)
    try:
        yield stack
    finally:
        stack.close()


_browsers: list[httpx.Client] = []


@pytest.fixture(autouse=True)
def _close_browsers() -> Iterator[None]:
    yield
    while _browsers:
        _browsers.pop().close()


def start_app_session(up: UpStack, image: str) -> str:
    session = up.cli("run", "--interactive", "--image", image, "--detach", check=True)
    session_id = session.stdout.strip()
    up.wait_status(session_id, {"RUNNING"}, timeout=120)
    return session_id


def sign_in(up: UpStack, session_id: str, app: str) -> httpx.Client:
    """Follow `jobgate apps open`'s link like a browser: token -> cookie -> the app."""
    url = up.cli("apps", "open", session_id, app, check=True).stdout.strip().splitlines()[-1]
    browser = httpx.Client(timeout=30)
    _browsers.append(browser)
    first = browser.get(url)
    assert first.status_code == 303
    assert "jobgate_token" not in first.headers["location"]
    return browser


def wait_ok(client: httpx.Client, url: str, timeout: float = 60.0) -> httpx.Response:
    """Apps take a few seconds to listen after the container starts (502 until then)."""

    def ok() -> httpx.Response | None:
        response = client.get(url)
        return response if response.status_code == 200 else None

    return until_sync(ok, timeout=timeout, interval=0.5, what=f"{url} answers 200")


async def run_code(ws_url: str, cookies: str, code: str) -> str:
    """Execute *code* in a Jupyter kernel over its channels WebSocket; return its output."""
    message_id = uuid.uuid4().hex
    request = {
        "header": {
            "msg_id": message_id,
            "msg_type": "execute_request",
            "username": "t",
            "session": uuid.uuid4().hex,
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "channel": "shell",
        "content": {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
        },
    }
    origin = Origin(ws_url.replace("ws://", "http://").split("/s/")[0])
    async with websockets.connect(
        ws_url, additional_headers={"Cookie": cookies}, origin=origin, open_timeout=30
    ) as ws:
        await ws.send(json.dumps(request))
        while True:
            reply: dict[str, Any] = json.loads(await ws.recv())
            if reply.get("parent_header", {}).get("msg_id") != message_id:
                continue
            kind = reply["msg_type"]
            if kind == "execute_result":
                return str(reply["content"]["data"]["text/plain"])
            if kind == "stream":
                return str(reply["content"]["text"]).strip()
            if kind == "error":
                raise AssertionError(reply["content"])


async def test_jupyter_rest_and_kernel_through_the_proxy(up: UpStack) -> None:
    session_id = start_app_session(up, JUPYTER)
    apps = up.cli_json("apps", "ls", session_id)
    assert [(a["name"], a["ready"]) for a in apps] == [("jupyter", True)]
    browser = sign_in(up, session_id, "jupyter")
    base = f"http://127.0.0.1:{up.proxy_port}/s/{session_id}/jupyter"
    api = wait_ok(browser, f"{base}/api")
    assert api.status_code == 200
    assert "version" in api.json()
    lab = browser.get(f"{base}/lab")  # sets the _xsrf cookie a browser would send back
    assert lab.status_code == 200
    assert "JupyterLab" in lab.text
    xsrf = browser.cookies.get("_xsrf", "")
    kernel = browser.post(
        f"{base}/api/kernels", json={"name": "python3"}, headers={"X-XSRFToken": xsrf}
    )
    assert kernel.status_code == 201, kernel.text
    cookies = "; ".join(f"{c.name}={c.value}" for c in browser.cookies.jar)
    ws_url = f"ws://127.0.0.1:{up.proxy_port}/s/{session_id}/jupyter/api/kernels/{kernel.json()['id']}/channels"
    assert await run_code(ws_url, cookies, "6*7") == "42"
    await direct_connections_are_refused(up, session_id, kernel.json()["id"])
    up.cli("sessions", "rm", session_id, check=True)


async def direct_connections_are_refused(up: UpStack, session_id: str, kernel_id: str) -> None:
    """Another tenant's process on the node reaches the published port, not the app; the
    secret that would open it is in no answer, listing or log a user (or admin) reads."""
    shown = up.cli_json("sessions", "show", session_id)
    (port,) = [k["ports"]["jupyter"] for k in shown["kernels"]]
    direct = f"http://127.0.0.1:{port}/s/{session_id}/jupyter"
    key = json.loads((up.data_dir / "secrets.json").read_text())["proxy_secret"]
    secret = app_secret(key, session_id)
    async with httpx.AsyncClient(timeout=30) as node_process:
        for headers in ({}, {"Authorization": "token guessed"}, {"X-Forwarded-For": "127.0.0.1"}):
            for path in ("/api/kernels", "/api/contents"):
                answer = await node_process.get(direct + path, headers=headers)
                assert answer.status_code == 403, (path, headers)
        lab = await node_process.get(f"{direct}/lab")
        assert lab.status_code in (302, 403)  # the login page, not the lab
        # the secret that would open it is the one the proxy presents, as Jupyter's token
        token = {"Authorization": f"token {secret}"}
        assert (await node_process.get(f"{direct}/api/kernels", headers=token)).status_code == 200
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(
            f"ws://127.0.0.1:{port}/s/{session_id}/jupyter/api/kernels/{kernel_id}/channels",
            origin=Origin(f"http://127.0.0.1:{port}"),
        ):
            pass
    assert refused.value.response.status_code == 403
    output = up.cli("logs", session_id, check=True)  # Jupyter logs to stderr
    assert "ServerApp" in output.stderr  # its start-up lines are there, without the secret
    seen = [
        output.stdout + output.stderr,
        up.cli("sessions", "show", session_id, "--output", "json", check=True).stdout,
        up.cli("apps", "ls", session_id, "--output", "json", check=True).stdout,
        up.cli("sessions", "ls", "--output", "json", check=True).stdout,
        up.output(),
        *(log.read_text(errors="replace") for log in (up.data_dir / "logs").glob("*.log")),
    ]
    assert not [text[:200] for text in seen if secret in text]


async def test_terminal_websocket_echoes_through_the_proxy(up: UpStack) -> None:
    session_id = start_app_session(up, TERMINAL)
    browser = sign_in(up, session_id, "terminal")
    base = f"127.0.0.1:{up.proxy_port}/s/{session_id}/terminal"
    assert wait_ok(browser, f"http://{base}/").status_code == 200
    cookies = "; ".join(f"{c.name}={c.value}" for c in browser.cookies.jar)
    async with websockets.connect(
        f"ws://{base}/websocket",
        additional_headers={"Cookie": cookies},
        origin=Origin(f"http://127.0.0.1:{up.proxy_port}"),
    ) as ws:
        await ws.send(json.dumps(["stdin", "echo answer-$((6*7))\r"]))
        seen = ""
        while "answer-42" not in seen.replace("answer-$((6*7))", ""):
            kind, *rest = json.loads(await ws.recv())
            if kind == "stdout":
                seen += rest[0]
    await direct_terminal_connections_are_refused(up, session_id)
    up.cli("sessions", "rm", session_id, check=True)


def basic(user: str, password: str) -> dict[str, str]:
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


async def direct_terminal_connections_are_refused(up: UpStack, session_id: str) -> None:
    """The terminal checks the Basic credential the proxy presents (as ``ttyd -c
    jobgate:$JOBGATE_APP_SECRET``): a process on the node that goes to its published port
    without it, or with a wrong one, gets a 401 for the page and for the WebSocket."""
    shown = up.cli_json("sessions", "show", session_id)
    (port,) = [k["ports"]["terminal"] for k in shown["kernels"]]
    direct = f"127.0.0.1:{port}"
    key = json.loads((up.data_dir / "secrets.json").read_text())["proxy_secret"]
    secret = app_secret(key, session_id)
    wrong = [
        {},
        basic(BASIC_USER, app_secret(key, "another-session")),
        basic(BASIC_USER, ""),
        basic("root", secret),
        {"X-Jobgate-App-Secret": secret, "X-Forwarded-For": "127.0.0.1"},
    ]
    async with httpx.AsyncClient(timeout=30) as node_process:
        for headers in wrong:
            answer = await node_process.get(f"http://{direct}/", headers=headers)
            assert answer.status_code == 401, headers
            assert answer.headers["www-authenticate"].startswith("Basic realm=")
            with pytest.raises(websockets.InvalidStatus) as refused:
                async with websockets.connect(
                    f"ws://{direct}/websocket",
                    origin=Origin(f"http://{direct}"),
                    additional_headers=headers,
                ):
                    pass
            assert refused.value.response.status_code == 401, headers
        # the credential that opens it is the one the proxy presents
        page = await node_process.get(f"http://{direct}/", headers=basic(BASIC_USER, secret))
        assert page.status_code == 200
        assert "new Terminal(" in page.text


def test_strangers_and_stale_links_are_refused(up: UpStack) -> None:
    session_id = start_app_session(up, JUPYTER)
    base = f"http://127.0.0.1:{up.proxy_port}/s/{session_id}/jupyter/api"
    assert httpx.get(base).status_code == 401  # no cookie, no key
    link = up.cli("apps", "open", session_id, "jupyter", check=True).stdout.strip().splitlines()[-1]
    assert httpx.get(link).status_code == 303
    assert httpx.get(link).status_code == 401  # a link works once
    up.cli("admin", "users", "create", "bob", "--no-key", check=True)
    bob_key = up.cli("admin", "users", "key", "bob", check=True).stdout.strip()
    stranger = httpx.get(base, headers={"Authorization": f"Bearer {bob_key}"})
    assert stranger.status_code == 403
    denied = up.cli("apps", "open", session_id, "jupyter", env={"JOBGATE_API_KEY": bob_key})
    assert denied.returncode == 1
    assert "no session" in denied.stderr
    # the owner's key works as a Bearer token too
    key = up.config.read_text().split('api_key = "')[1].split('"')[0]
    with httpx.Client(headers={"Authorization": f"Bearer {key}"}) as api_client:
        assert wait_ok(api_client, base).status_code == 200
    browser = sign_in(up, session_id, "jupyter")
    up.cli("sessions", "rm", session_id, check=True)
    up.wait_status(session_id, {"TERMINATED"}, timeout=60)

    def gone() -> httpx.Response | None:
        answer = browser.get(base)
        return answer if answer.status_code == 410 else None

    ended = until_sync(gone, timeout=20, interval=0.2, what="the proxy says the session ended")
    assert "ended" in ended.text


def test_idle_sessions_are_ended_and_busy_ones_are_not(up: UpStack) -> None:
    busy = start_app_session(up, TERMINAL)
    idle = start_app_session(up, TERMINAL)
    browser = sign_in(up, busy, "terminal")
    base = f"http://127.0.0.1:{up.proxy_port}/s/{busy}/terminal/"
    shown = up.cli_json("sessions", "show", busy)
    assert shown["idle_deadline"] is not None  # `sessions show` says when
    deadline = time.monotonic() + 22  # longer than the 15 s idle timeout
    while time.monotonic() < deadline:
        browser.get(base)  # traffic through the proxy counts as activity
        time.sleep(0.5)
    assert up.cli_json("sessions", "show", busy)["status"] == "RUNNING"
    ended = up.wait_status(idle, {"TERMINATED"}, timeout=60)
    assert ended["status_reason"].startswith("idle for 15s")
    up.cli("sessions", "rm", busy, check=True)


def test_run_in_the_foreground_prints_a_working_link_once_the_app_is_ready(up: UpStack) -> None:
    """`jobgate run --interactive` (not detached) says when each app is ready, with a
    one-time link that signs a browser in; Ctrl-C then cancels the session."""
    proc = up.popen("run", "--interactive", "--image", TERMINAL)
    assert proc.stderr is not None
    link, said = "", []
    deadline = time.monotonic() + 150
    try:
        while not link and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stderr], [], [], 1.0)
            if not ready:
                continue
            line = proc.stderr.readline()
            if not line:
                break  # it ended
            said.append(line)
            if line.startswith("jobgate: terminal is ready: "):
                link = line.split("is ready: ", 1)[1].strip()
        assert link, "".join(said)
        browser = httpx.Client(timeout=30)
        _browsers.append(browser)
        first = browser.get(link)
        assert first.status_code == 303  # token -> cookie, as `apps open`'s link
        assert first.next_request is not None
        assert wait_ok(browser, str(first.next_request.url)).status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)  # reads the rest and closes the pipes
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
