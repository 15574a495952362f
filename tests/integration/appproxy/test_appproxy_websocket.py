"""WebSockets through the proxy: subprotocols, text and binary frames, close codes, auth."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from proxy_harness import OWNER, SESSION, Proxy, ProxyFactory
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Origin, Subprotocol

from contract.keys import activity_key
from contract.routes import AppRoute, RouteRecord, write_route

pytestmark = pytest.mark.timeout(60)
HANG_GUARD = 15.0


def ws_url(proxy: Proxy, path: str) -> str:
    return proxy.url.replace("http://", "ws://") + path


def cookie_header(proxy: Proxy, **kwargs: Any) -> dict[str, str]:
    value = proxy.cookie(**kwargs)["jobgate_auth"]
    return {"Cookie": f"jobgate_auth={value}; theme=dark"}


async def test_echo_with_subprotocol_text_and_binary(proxy: Proxy) -> None:
    origin = proxy.url
    public_host = proxy.url.removeprefix("http://")
    async with connect(
        ws_url(proxy, f"/s/{SESSION}/echo/ws"),
        subprotocols=[Subprotocol("jupyter.v1")],
        additional_headers=cookie_header(proxy),
        origin=Origin(origin),
        max_size=None,
        compression=None,
    ) as ws:
        assert ws.subprotocol == "jupyter.v1"
        await ws.send("hello")
        assert await ws.recv() == "hello"
        await ws.send(b"\x00\x01\xffbinary")
        assert await ws.recv() == b"\x00\x01\xffbinary"
        big = bytes(range(256)) * 8192  # 2 MiB in one frame
        await ws.send(big)
        assert await ws.recv() == big
    # code-server accepts a WebSocket only if its Origin matches the host it is told about
    assert proxy.upstream.state.ws_origins == [origin]
    assert proxy.upstream.state.ws_hosts == [(public_host, public_host)]


async def test_app_close_code_reaches_client(proxy: Proxy) -> None:
    async with connect(
        ws_url(proxy, f"/s/{SESSION}/echo/ws"), additional_headers=cookie_header(proxy)
    ) as ws:
        await ws.send("close:4321")
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), HANG_GUARD)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4321
    assert closed.value.rcvd.reason == "bye"


async def test_client_close_code_reaches_app(proxy: Proxy) -> None:
    state = proxy.upstream.state
    async with connect(
        ws_url(proxy, f"/s/{SESSION}/echo/ws"), additional_headers=cookie_header(proxy)
    ) as ws:
        await ws.send("ping")
        assert await ws.recv() == "ping"
        await ws.close(code=4000, reason="done")
    await asyncio.wait_for(state.ws_closed.wait(), HANG_GUARD)
    assert state.ws_close_codes == [4000]


@pytest.mark.parametrize(
    ("name", "headers", "status"),
    [
        ("no credentials", {}, 401),
        ("another user's key", {"Authorization": "Bearer jg_mallory"}, 403),
    ],
)
async def test_refused_handshake_is_an_http_answer(
    proxy: Proxy, name: str, headers: dict[str, str], status: int
) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(ws_url(proxy, f"/s/{SESSION}/echo/ws"), additional_headers=headers):
            pass
    assert refused.value.response.status_code == status, name
    assert proxy.upstream.state.ws_origins == [], name  # the app never saw it


async def test_bearer_key_opens_websocket(proxy: Proxy) -> None:
    headers = {"Authorization": "Bearer jg_alice"}
    async with connect(ws_url(proxy, f"/s/{SESSION}/echo/ws"), additional_headers=headers) as ws:
        await ws.send("hi")
        assert await ws.recv() == "hi"


@pytest.mark.parametrize(
    ("name", "path", "upstream", "status"),
    [
        ("app refuses the upgrade", "/refuse-ws", None, 403),
        ("app not listening", "/ws", "http://127.0.0.1:9", 502),
    ],
)
async def test_app_side_failures(
    proxy: Proxy, name: str, path: str, upstream: str | None, status: int
) -> None:
    if upstream is not None:
        await write_route(
            proxy.redis,
            RouteRecord(
                session_id=SESSION, owner_id=OWNER, apps={"echo": AppRoute(upstream=upstream)}
            ),
        )
    with pytest.raises(InvalidStatus) as refused:
        async with connect(
            ws_url(proxy, f"/s/{SESSION}/echo{path}"), additional_headers=cookie_header(proxy)
        ):
            pass
    assert refused.value.response.status_code == status, name


async def test_websocket_traffic_counts_as_activity(proxy_factory: ProxyFactory) -> None:
    # No background flushes during the test (an hour apart): flush() by hand instead, so
    # what lands in Redis is exactly what was touched since the last flush.
    proxy = await proxy_factory(proxy_activity_interval=3600)
    recorder = proxy.app.activity
    assert recorder is not None
    key = activity_key(SESSION)
    async with connect(
        ws_url(proxy, f"/s/{SESSION}/echo/ws"), additional_headers=cookie_header(proxy)
    ) as ws:
        await ws.send("one")
        await ws.recv()
        await recorder.flush()
        assert await proxy.redis.get(key) is not None
        await proxy.redis.delete(key)
        await recorder.flush()  # nothing new happened: nothing is written
        assert await proxy.redis.get(key) is None
        await ws.send("two")  # a message alone, on a socket opened long ago
        await ws.recv()
        await recorder.flush()
        assert await proxy.redis.get(key) is not None


async def test_app_that_drops_the_connection_closes_client_with_1011(proxy: Proxy) -> None:
    async with connect(
        ws_url(proxy, f"/s/{SESSION}/echo/ws"), additional_headers=cookie_header(proxy)
    ) as ws:
        await ws.send("still there?")
        assert await ws.recv() == "still there?"
        await ws.send("crash")  # the app aborts its TCP connection: no close frame
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), HANG_GUARD)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1011


async def test_proxy_shutdown_tells_open_websockets_it_is_going_away(
    proxy_factory: ProxyFactory,
) -> None:
    proxy = await proxy_factory()
    async with connect(
        ws_url(proxy, f"/s/{SESSION}/echo/ws"), additional_headers=cookie_header(proxy)
    ) as ws:
        await ws.send("hi")
        assert await ws.recv() == "hi"
        stopping = asyncio.create_task(proxy.stop())
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), HANG_GUARD)
        await asyncio.wait_for(stopping, HANG_GUARD)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1001
    # and the app's side of the tunnel was closed too
    await asyncio.wait_for(proxy.upstream.state.ws_closed.wait(), HANG_GUARD)


async def test_compression_is_agreed_between_client_and_app(proxy: Proxy) -> None:
    async with connect(
        ws_url(proxy, f"/s/{SESSION}/echo/ws"),
        additional_headers=cookie_header(proxy),
        compression="deflate",
    ) as ws:
        assert "permessage-deflate" in ws.response.headers["Sec-WebSocket-Extensions"]
        text = "print('hello')\n" * 20_000
        await ws.send(text)
        assert await ws.recv() == text


async def test_a_client_that_stops_reading_holds_the_app_back(proxy: Proxy) -> None:
    """Back-pressure is end to end: the proxy does not buffer what the client won't take."""
    state = proxy.upstream.state
    messages = 1000  # 64 KiB each: 64 MiB if nothing held the app back
    async with connect(
        ws_url(proxy, f"/s/{SESSION}/echo/ws"),
        additional_headers=cookie_header(proxy),
        compression=None,
        max_size=None,
        max_queue=4,
    ) as ws:
        await ws.send(f"flood:{messages}")
        last = -1
        while state.ws_flood_sent != last:  # until the app is stuck (or done)
            last = state.ws_flood_sent
            await asyncio.sleep(0.3)
        assert state.ws_flood_sent < messages // 2
        for _ in range(messages):  # reading again lets the app finish
            assert len(await asyncio.wait_for(ws.recv(), HANG_GUARD)) == 65536
    assert state.ws_flood_sent == messages


async def test_an_app_that_stops_reading_holds_the_client_back(proxy: Proxy) -> None:
    messages = 1000  # 64 KiB each: 64 MiB would pile up in the proxy without back-pressure
    async with connect(
        ws_url(proxy, f"/s/{SESSION}/echo/ws"),
        additional_headers=cookie_header(proxy),
        compression=None,
        max_size=None,
    ) as ws:
        await ws.send("sink:4")  # the app reads nothing for 4 seconds
        sent = 0

        async def pump() -> None:
            nonlocal sent
            for _ in range(messages):
                await ws.send(b"c" * 65536)
                sent += 1

        pumping = asyncio.create_task(pump())
        last = -1
        while sent != last:  # until the client is stuck (or done)
            last = sent
            await asyncio.sleep(0.3)
        assert sent < messages // 2
        await asyncio.wait_for(pumping, HANG_GUARD)  # the app reads again: all goes through
        await ws.send("end")
        assert await asyncio.wait_for(ws.recv(), HANG_GUARD) == f"sunk:{messages}"


async def test_an_app_that_never_answers_the_upgrade_gets_504(
    proxy_factory: ProxyFactory,
) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)  # takes the request, answers nothing
        await asyncio.wait_for(reader.read(), HANG_GUARD)  # until the proxy gives up on it
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        proxy = await proxy_factory(proxy_upstream_read_timeout=0.5)
        await proxy.set_route(upstream=f"http://127.0.0.1:{port}")
        with pytest.raises(InvalidStatus) as refused:
            async with connect(
                ws_url(proxy, f"/s/{SESSION}/echo/ws"), additional_headers=cookie_header(proxy)
            ):
                pass
        assert refused.value.response.status_code == 504
    finally:
        server.close()
