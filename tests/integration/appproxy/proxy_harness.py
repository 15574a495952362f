"""The parts the app proxy's integration tests run against (fixtures in conftest.py).

* a test **app** (aiohttp, random port) that behaves like the apps the proxy carries: it
  echoes requests, streams Server-Sent Events on cue, reads uploads incrementally, serves
  large downloads and echoes WebSockets (subprotocols, binary frames, close codes);
* a **gateway stand-in** answering ``GET /v1/users/me`` as the gateway's documented
  contract says (200 with id/name/role and the key's scopes and expiry for a known,
  unexpired key, 401 otherwise; ``tests/integration/gateway/test_api_keys.py`` checks
  the gateway's own answer has that shape);
* the **proxy** itself under uvicorn in the test's event loop, on a random port, with a
  route for session ``SESSION`` owned by ``OWNER`` in Redis.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import uvicorn
from aiohttp import WSMsgType, web
from redis.asyncio import Redis

from appproxy.server import ProxyApp, uvicorn_config
from appproxy.settings import ProxySettings
from contract.routes import AppRoute, RouteRecord, app_url, write_route
from contract.tokens import issue_app_token, issue_cookie

SECRET = "test-secret-0123456789abcdef"
SESSION = "0b5e7c1a-7d43-4cf4-9a51-2f0e3c8d9e11"
OTHER_SESSION = "9d2f4b6c-1111-4222-8333-444455556666"
OWNER = "user-alice"
STRANGER = "user-mallory"
ADMIN = "user-root"
USER_SCOPES = ("read", "sessions", "endpoints", "folders")


@dataclass(frozen=True)
class StubKey:
    """A key the gateway stand-in knows: whose, with which scopes, until when (epoch s)."""

    user_id: str
    role: str = "user"
    scopes: tuple[str, ...] = USER_SCOPES
    expires_at: float | None = None

    def answer(self) -> dict[str, Any]:
        """``GET /v1/users/me``'s body, as the gateway writes it."""
        expires = None
        if self.expires_at is not None:
            at = datetime.fromtimestamp(self.expires_at, UTC)
            expires = at.isoformat().replace("+00:00", "Z")
        return {
            "id": self.user_id,
            "name": self.user_id.removeprefix("user-"),
            "role": self.role,
            "created_at": "2026-01-01T00:00:00Z",
            "key": {"scopes": list(self.scopes), "expires_at": expires},
        }


KEYS = {
    "jg_alice": StubKey(OWNER),
    "jg_alice_read": StubKey(OWNER, scopes=("read",)),
    "jg_alice_sessions": StubKey(OWNER, scopes=("sessions",)),
    "jg_alice_endpoints": StubKey(OWNER, scopes=("endpoints",)),
    "jg_mallory": StubKey(STRANGER),
    "jg_root": StubKey(ADMIN, "admin", (*USER_SCOPES, "admin")),
}


# ---- the app behind the proxy ----------------------------------------------------------
@dataclass
class AppState:
    """What the test app saw, and cues the tests give it."""

    release_second_event: asyncio.Event = field(default_factory=asyncio.Event)
    sse_client_gone: asyncio.Event = field(default_factory=asyncio.Event)
    upload_first_chunk: asyncio.Event = field(default_factory=asyncio.Event)
    ws_close_codes: list[int | None] = field(default_factory=list)
    ws_flood_sent: int = 0
    ws_closed: asyncio.Event = field(default_factory=asyncio.Event)
    ws_origins: list[str | None] = field(default_factory=list)
    ws_hosts: list[tuple[str | None, str | None]] = field(default_factory=list)


@dataclass
class AppServer:
    url: str
    state: AppState


def _strip_session_prefix(path: str) -> str:
    """/s/{session}/{app}/x -> /x, so the app answers the same with or without prefixes."""
    if path.startswith("/s/"):
        parts = path.split("/", 4)
        return "/" + (parts[4] if len(parts) > 4 else "")
    return path


class SampleApp:
    """The app behind the proxy; it answers the same with or without the session prefix."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self.web = web.Application(client_max_size=1024**3)
        self.web.router.add_route("*", "/{tail:.*}", self.route)

    async def route(self, request: web.Request) -> web.StreamResponse:
        path = _strip_session_prefix(request.path)
        if path == "/sse":
            return await self.sse(request)
        if path == "/upload":
            return await self.upload(request)
        if path.startswith("/download/"):
            return await self.download(request, int(path.rsplit("/", 1)[1]))
        if path == "/ws":
            return await self.websocket(request)
        if path == "/refuse-ws":
            raise web.HTTPForbidden(text="origin not allowed")
        return await self.echo(request)

    async def echo(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        return web.json_response(
            {
                "method": request.method,
                "raw_path": request.raw_path,
                "headers": [[k, v] for k, v in request.headers.items()],
                "body_length": len(body),
                "port": request.transport.get_extra_info("sockname")[1] if request.transport else 0,
                # the proxy's end of the connection: the same one twice is keep-alive reuse
                "peer": request.transport.get_extra_info("peername")[1] if request.transport else 0,
            },
            headers={
                "Set-Cookie": "app_cookie=1; Path=/",
                "Connection": "X-Hop",
                "X-Hop": "must-not-pass",
                "Keep-Alive": "timeout=5",
            },
        )

    async def sse(self, request: web.Request) -> web.StreamResponse:
        """One event, then the second only when the test says so, then keep-alives."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: first\n\n")
        await self.state.release_second_event.wait()
        await response.write(b"data: second\n\n")
        try:
            while True:
                await asyncio.sleep(0.05)
                await response.write(b": keep-alive\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.state.sse_client_gone.set()
            raise

    async def upload(self, request: web.Request) -> web.StreamResponse:
        digest = hashlib.sha256()
        size = 0
        async for chunk in request.content.iter_any():
            if size == 0:
                self.state.upload_first_chunk.set()
            digest.update(chunk)
            size += len(chunk)
        return web.json_response({"size": size, "sha256": digest.hexdigest()})

    async def download(self, request: web.Request, size: int) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await response.prepare(request)
        block = bytes(range(256)) * 256  # 64 KiB
        sent = 0
        while sent < size:
            piece = block[: min(len(block), size - sent)]
            await response.write(piece)
            sent += len(piece)
        await response.write_eof()
        return response

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        """Echo; "close:CODE" makes the app close with CODE and reason "bye", "crash" makes
        it drop the connection without a close frame, "flood:N" sends N 64 KiB messages,
        "sink:S" stops reading for S seconds and then swallows binary messages until "end",
        answering "sunk:COUNT"."""
        ws = web.WebSocketResponse(protocols=("jupyter.v1", "other.v2"), compress=True)
        await ws.prepare(request)
        self.state.ws_origins.append(request.headers.get("Origin"))
        self.state.ws_hosts.append(
            (request.headers.get("Host"), request.headers.get("X-Forwarded-Host"))
        )
        sinking, sunk = False, 0
        async for msg in ws:
            if sinking and msg.type == WSMsgType.BINARY:
                sunk += 1
            elif sinking and msg.type == WSMsgType.TEXT and msg.data == "end":
                sinking = False
                await ws.send_str(f"sunk:{sunk}")
            elif msg.type == WSMsgType.TEXT and msg.data.startswith("sink:"):
                await asyncio.sleep(float(msg.data[5:]))
                sinking, sunk = True, 0
            elif msg.type == WSMsgType.TEXT and msg.data.startswith("close:"):
                await ws.close(code=int(msg.data[6:]), message=b"bye")
            elif msg.type == WSMsgType.TEXT and msg.data == "crash":
                assert request.transport is not None
                request.transport.abort()
            elif msg.type == WSMsgType.TEXT and msg.data.startswith("flood:"):
                for _ in range(int(msg.data[6:])):
                    await ws.send_bytes(b"f" * 65536)
                    self.state.ws_flood_sent += 1
            elif msg.type == WSMsgType.TEXT:
                await ws.send_str(msg.data)
            elif msg.type == WSMsgType.BINARY:
                await ws.send_bytes(msg.data)
        self.state.ws_close_codes.append(ws.close_code)
        self.state.ws_closed.set()
        return ws


async def start_site(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


@asynccontextmanager
async def running_app() -> AsyncIterator[AppServer]:
    state = AppState()
    runner, url = await start_site(SampleApp(state).web)
    try:
        yield AppServer(url, state)
    finally:
        state.release_second_event.set()
        await runner.cleanup()


# ---- the gateway's /v1/users/me ----------------------------------------------------------
@dataclass
class GatewayStub:
    url: str
    calls: list[str]
    keys: dict[str, StubKey]  # a test may add one (an expiring key, say)


@asynccontextmanager
async def running_gateway() -> AsyncIterator[GatewayStub]:
    calls: list[str] = []
    keys = dict(KEYS)

    async def me(request: web.Request) -> web.StreamResponse:
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        calls.append(hashlib.sha256(key.encode()).hexdigest())
        known = keys.get(key)
        if known is None or (known.expires_at is not None and known.expires_at <= time.time()):
            return web.json_response({"title": "unauthorized"}, status=401)
        return web.json_response(known.answer())

    app = web.Application()
    app.router.add_get("/v1/users/me", me)
    runner, url = await start_site(app)
    try:
        yield GatewayStub(url, calls, keys)
    finally:
        await runner.cleanup()


# ---- the proxy ---------------------------------------------------------------------------
@dataclass
class Proxy:
    url: str
    app: ProxyApp
    redis: Redis
    upstream: AppServer
    settings: ProxySettings
    server: uvicorn.Server
    serving: asyncio.Task[None]

    async def stop(self) -> None:
        """Shut the proxy down as SIGTERM would (graceful, then connections are closed)."""
        self.server.should_exit = True
        await self.serving

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=10.0, **kwargs)

    def link(
        self,
        app: str = "echo",
        *,
        user: str = OWNER,
        session: str = SESSION,
        ttl: int = 60,
        admin: bool = False,
    ) -> str:
        """What the gateway would return from POST /v1/sessions/{id}/apps/{app}."""
        token = issue_app_token(SECRET, session, app, user, ttl, admin=admin)
        return app_url(self.url, session, app, token)

    def cookie(
        self,
        *,
        user: str = OWNER,
        session: str = SESSION,
        admin: bool = False,
        lifetime: int = 3600,
    ) -> dict[str, str]:
        return {"jobgate_auth": issue_cookie(SECRET, session, user, admin=admin, lifetime=lifetime)}

    async def set_route(
        self,
        *,
        session: str = SESSION,
        owner: str = OWNER,
        upstream: str | None = None,
        status: str = "running",
    ) -> None:
        target = upstream or self.upstream.url
        record = RouteRecord.model_validate(
            {
                "session_id": session,
                "owner_id": owner,
                "status": status,
                "apps": {
                    "echo": AppRoute(upstream=target, strip_prefix=True),
                    "jupyter": AppRoute(upstream=target, strip_prefix=False),
                },
            }
        )
        await write_route(self.redis, record)


ProxyFactory = Callable[..., Awaitable[Proxy]]


class _InProcessServer(uvicorn.Server):
    """uvicorn inside the test's loop; the test runner keeps its own signal handling."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@asynccontextmanager
async def proxy_starter(
    redis_url: str, app: AppServer, gateway: GatewayStub
) -> AsyncIterator[ProxyFactory]:
    """Start proxies (settings overridable); each finds the default route in Redis."""
    redis = Redis.from_url(redis_url)
    started: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []

    async def start(**overrides: Any) -> Proxy:
        options: dict[str, Any] = {
            "proxy_secret": SECRET,
            "redis_url": redis_url,
            "gateway_url": gateway.url,
            "proxy_port": 0,
            "proxy_activity_interval": 0.05,
        }
        options.update(overrides)
        settings = ProxySettings(**options)
        config = uvicorn_config(settings, port=0, log_level="warning", timeout_graceful_shutdown=2)
        server = _InProcessServer(config)
        task = asyncio.create_task(server.serve())
        started.append((server, task))
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        proxy_app = config.app
        assert isinstance(proxy_app, ProxyApp)
        assert proxy_app.routes is not None
        await asyncio.wait_for(proxy_app.routes.live.wait(), 10)
        proxy = Proxy(f"http://127.0.0.1:{port}", proxy_app, redis, app, settings, server, task)
        await proxy.set_route()
        return proxy

    try:
        yield start
    finally:
        for server, task in started:
            server.should_exit = True
            await task
        await redis.aclose()


def problem(response: httpx.Response) -> dict[str, Any]:
    """The RFC 7807 body of a refusal."""
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = json.loads(response.content)
    return body
