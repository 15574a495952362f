"""The interactive app images of scripts/build-test-images.sh serve what their label says.

Each image runs in rootless Podman through the podman runtime with its default command
and the port named by its ``jobgate.service-ports`` label published on 127.0.0.1, as a
session of the app proxy's would. A user would notice each of these: the web terminal
gives a shell in the session's working directory, refuses pages from other sites and,
as ``ttyd -c jobgate:$JOBGATE_APP_SECRET`` would, answers anyone without the session's
Basic credential (the proxy's) with a 401; code-server, started as jobgate starts it,
serves the workbench only to the proxy's cookie (the session's app secret), sending
anyone else to its login page.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import websockets
from needs import missing
from podman import PodmanClient
from waiting import until
from websockets.typing import Origin

from contract.apps import BASIC_USER, CODE_SERVER_COOKIE, secret_env, with_defaults
from plugins.runtimes.base import KernelHandle, KernelSpec, RuntimeContext, ServicePort
from plugins.runtimes.podman import PodmanRuntime, PodmanSettings
from plugins.runtimes.podman.spec import parse_ports_label
from workers.apps import start_command

pytestmark = pytest.mark.podman

CODESERVER = "localhost/jobgate-codeserver:latest"
TERMINAL = "localhost/jobgate-terminal:latest"
SECRET = "7a" * 32  # a session's app secret, as the worker hands it to the container


def basic(user: str, password: str) -> dict[str, str]:
    """An Authorization header with Basic *user*:*password* (the proxy's: jobgate:<secret>)."""
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


AS_PROXY = basic(BASIC_USER, SECRET)


def image_ports(socket: str, image: str) -> list[ServicePort]:
    """The image's ``jobgate.service-ports`` label, read back; missing image -> skip/fail."""
    with PodmanClient(base_url=socket) as client:
        if not client.images.exists(image):
            missing(f"no {image} (run scripts/build-test-images.sh)")
        labels = client.images.get(image).labels or {}
    return parse_ports_label(labels.get("jobgate.service-ports", ""))


@pytest.fixture
async def runtime(podman_socket: str) -> AsyncIterator[PodmanRuntime]:
    """A podman runtime for a node of this test's own; its containers go afterwards."""
    node = f"e2e-apps-{uuid.uuid4().hex[:10]}"
    rt = PodmanRuntime(
        PodmanSettings(socket=podman_socket), RuntimeContext(node, Path("/nonexistent"))
    )
    try:
        yield rt
    finally:
        for handle in await rt.list_kernels():
            with contextlib.suppress(Exception):
                await rt.remove(handle)
        await rt.close()


async def start_app(
    rt: PodmanRuntime,
    image: str,
    workdir: str | None = None,
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> KernelHandle:
    spec = KernelSpec(
        kernel_id=str(uuid.uuid4()),
        session_id=str(uuid.uuid4()),
        node_id=rt.context.node_id,
        command=command or [],  # [] the image's own
        image=image,
        env=env or {},
        workdir=workdir,
        ports=image_ports(rt.settings.socket, image),
    )

    async def progress(message: str) -> None:
        pass

    await rt.prepare(spec, progress)
    return await rt.start(spec)


async def get_when_up(
    url: str, timeout: float = 90.0, headers: dict[str, str] | None = None
) -> httpx.Response:
    """GET *url* once the app listens (connection errors until then)."""
    async with httpx.AsyncClient(timeout=10, follow_redirects=True, headers=headers) as client:

        async def answer() -> httpx.Response | None:
            try:
                return await client.get(url)
            except httpx.TransportError:
                return None

        return await until(answer, timeout=timeout, interval=0.2, what=f"{url} listening")


@pytest.mark.parametrize(
    ("image", "port"),
    [
        pytest.param(CODESERVER, ServicePort("code-server", "http", 8080), id="code-server"),
        pytest.param(TERMINAL, ServicePort("terminal", "http", 7681), id="terminal"),
    ],
)
def test_image_names_its_app_port(podman_socket: str, image: str, port: ServicePort) -> None:
    assert image_ports(podman_socket, image) == [port]


@pytest.fixture
async def rt_terminal(runtime: PodmanRuntime) -> KernelHandle:
    """The terminal image, started in /srv/work (created by the runtime) with an app secret."""
    return await start_app(runtime, TERMINAL, workdir="/srv/work", env=secret_env(SECRET))


async def test_terminal_gives_a_shell_in_the_working_directory(rt_terminal: KernelHandle) -> None:
    base = f"127.0.0.1:{rt_terminal.ports['terminal']}/s/some-session/terminal"
    page = await get_when_up(f"http://{base}/", headers=AS_PROXY)
    assert page.status_code == 200
    assert "new Terminal(" in page.text  # the client comes with the page, no CDN
    output = ""
    async with (
        websockets.connect(f"ws://{base}/websocket", additional_headers=AS_PROXY) as ws,
        asyncio.timeout(30),
    ):
        await ws.send(json.dumps(["set_size", 24, 80]))
        await ws.send(json.dumps(["stdin", "echo answer-$((6*7)); pwd\r"]))
        while "answer-42\r\n/srv/work\r\n" not in output:
            kind, *rest = json.loads(await ws.recv())
            if kind == "stdout":
                output += rest[0]


async def test_terminal_refuses_websockets_from_other_sites(rt_terminal: KernelHandle) -> None:
    base = f"127.0.0.1:{rt_terminal.ports['terminal']}"
    await get_when_up(f"http://{base}/", headers=AS_PROXY)
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(
            f"ws://{base}/websocket",
            origin=Origin("https://evil.example"),
            additional_headers=AS_PROXY,
        ):
            pass
    assert refused.value.response.status_code == 403
    async with websockets.connect(
        f"ws://{base}/websocket", origin=Origin(f"http://{base}"), additional_headers=AS_PROXY
    ) as ws:
        assert json.loads(await ws.recv()) == ["setup", {}]


#: what a process on the node might send instead of the proxy's Basic jobgate:<secret>
WRONG: list[dict[str, str]] = [
    {},
    basic(BASIC_USER, "7b" * 32),  # another session's secret
    basic("root", SECRET),  # the right secret under another user name
    basic(BASIC_USER, ""),
    {"Authorization": f"token {SECRET}"},  # Jupyter's form
    {"Authorization": "Basic !!!"},  # not base64
    {"X-Jobgate-App-Secret": SECRET},  # the form for apps of the image's own
]


async def refused(url: str, headers: dict[str, str]) -> None:
    """*url* answers 401 with a Basic challenge, as ttyd -c does, and no page; so does its
    WebSocket upgrade."""
    answer = await get_when_up(url, headers=headers)
    assert answer.status_code == 401, headers
    assert answer.headers["www-authenticate"].startswith("Basic realm=")
    assert "new Terminal(" not in answer.text
    ws_url = url.replace("http://", "ws://").rstrip("/") + "/websocket"
    origin = Origin(url.split("/s/")[0].rstrip("/"))
    with pytest.raises(websockets.InvalidStatus) as upgrade:
        async with websockets.connect(ws_url, origin=origin, additional_headers=headers):
            pass
    assert upgrade.value.response.status_code == 401, headers
    assert upgrade.value.response.headers["WWW-Authenticate"].startswith("Basic realm=")


async def test_terminal_refuses_all_but_the_app_secret(rt_terminal: KernelHandle) -> None:
    """A process on the node that reaches the published port gets no shell without the
    session's Basic credential, the one the proxy presents."""
    base = f"http://127.0.0.1:{rt_terminal.ports['terminal']}"
    for headers in WRONG:
        for path in ("/", "/s/some-session/terminal/"):
            await refused(base + path, headers)
    assert (await get_when_up(f"{base}/", headers=AS_PROXY)).status_code == 200


async def test_terminal_without_an_app_secret_opens_to_nobody(runtime: PodmanRuntime) -> None:
    """Started outside a session (no JOBGATE_APP_SECRET), no credential opens it: not even
    an empty password, which ``ttyd -c "jobgate:"`` would take."""
    handle = await start_app(runtime, TERMINAL)
    base = f"http://127.0.0.1:{handle.ports['terminal']}"
    for headers in ({}, basic(BASIC_USER, ""), basic(BASIC_USER, SECRET)):
        await refused(f"{base}/", headers)


async def test_codeserver_serves_the_workbench_to_the_app_secret_only(
    runtime: PodmanRuntime,
) -> None:
    secret = "5e" * 32
    app = with_defaults("code-server", 8080)
    command = [*(start_command("s1", [app]) or []), "--disable-update-check", "."]
    handle = await start_app(
        runtime, CODESERVER, workdir="/srv/project", command=command, env=secret_env(secret)
    )
    base = f"http://127.0.0.1:{handle.ports['code-server']}"
    health = await get_when_up(f"{base}/healthz")
    assert health.status_code == 200
    assert health.json()["status"] in ("alive", "expired")
    stranger = await get_when_up(f"{base}/")  # a process on the node, without the cookie
    assert "/login" in str(stranger.url)
    assert "vscode-workbench-web-configuration" not in stranger.text
    guess = {CODE_SERVER_COOKIE: "5f" * 32}
    async with httpx.AsyncClient(timeout=10, follow_redirects=True, cookies=guess) as wrong:
        assert "/login" in str((await wrong.get(f"{base}/")).url)
    as_proxy = {CODE_SERVER_COOKIE: secret}  # the cookie the proxy adds
    async with httpx.AsyncClient(timeout=10, follow_redirects=True, cookies=as_proxy) as proxy:
        workbench = await proxy.get(f"{base}/")
    assert workbench.status_code == 200
    assert "vscode-workbench-web-configuration" in workbench.text
    assert "/srv/project" in str(workbench.url)  # it opened the session's working directory
