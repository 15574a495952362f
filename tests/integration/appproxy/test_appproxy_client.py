"""The proxy's HTTP/1.1 client against a scripted server that misbehaves on cue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from appproxy.backend.client import (
    ConnectionPool,
    UpstreamBroken,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from appproxy.backend.http1 import Origin

pytestmark = pytest.mark.timeout(30)
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

Script = Callable[[bytes, int, asyncio.StreamWriter], Awaitable[bool]]


class Scripted:
    """A raw HTTP server: for each request, ``script(head, connection_number, writer)``
    writes whatever it likes and returns whether to keep the connection open."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                if b"content-length: " in head.lower():
                    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                    await reader.readexactly(length)
                if not await self.script(head, number, writer):
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[tuple[Scripted, Origin]]:
    server = Scripted(script)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield server, Origin("http", "127.0.0.1", port)
    finally:
        listener.close()
        await listener.wait_closed()


async def body_of(
    pool: ConnectionPool, origin: Origin, method: bytes = b"GET", body: bytes | None = None
) -> tuple[int, bytes]:
    headers = [(b"host", b"app")]
    chunks = None
    if body is not None:
        headers.append((b"content-length", str(len(body)).encode()))

        async def one() -> AsyncIterator[bytes]:
            yield body

        chunks = one()
    response = await pool.request(method, origin, b"/x", headers, chunks)
    data = b""
    while chunk := await response.read():
        data += chunk
    response.release()
    return response.status, data


@pytest.fixture
async def pool() -> AsyncIterator[ConnectionPool]:
    pool = ConnectionPool(connect_timeout=5, read_timeout=5)
    try:
        yield pool
    finally:
        pool.close()


async def test_keep_alive_reuses_one_connection(pool: ConnectionPool) -> None:
    async def script(head: bytes, number: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(OK)
        return True

    async with scripted(script) as (server, origin):
        for _ in range(3):
            assert await body_of(pool, origin) == (200, b"ok")
    assert server.connections == 1


async def test_connection_close_is_not_reused(pool: ConnectionPool) -> None:
    async def script(head: bytes, number: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
        return False

    async with scripted(script) as (server, origin):
        for _ in range(2):
            assert await body_of(pool, origin) == (200, b"ok")
    assert server.connections == 2


@pytest.mark.parametrize(
    ("name", "method", "body", "outcome"),
    [
        ("idempotent request is retried on a fresh connection", b"GET", None, (200, b"ok")),
        ("a POST is not retried", b"POST", b"data", None),
    ],
)
async def test_stale_pooled_connection(
    pool: ConnectionPool,
    name: str,
    method: bytes,
    body: bytes | None,
    outcome: tuple[int, bytes] | None,
) -> None:
    async def script(head: bytes, number: int, writer: asyncio.StreamWriter) -> bool:
        if number == 1 and len(server.requests) > 1:
            return False  # the app dropped its idle connection just as a request came
        writer.write(OK)
        return True

    async with scripted(script) as (server, origin):
        assert await body_of(pool, origin) == (200, b"ok")
        if outcome is None:
            with pytest.raises(UpstreamUnavailable):
                await body_of(pool, origin, method, body)
        else:
            assert await body_of(pool, origin, method, body) == outcome, name
            assert server.connections == 2, name


@pytest.mark.parametrize(
    ("name", "answer", "expected"),
    [
        (
            "chunked",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            (200, b"abcde"),
        ),
        (
            "early hints skipped",
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n" + OK,
            (200, b"ok"),
        ),
        ("no content", b"HTTP/1.1 204 No Content\r\n\r\n", (204, b"")),
    ],
)
async def test_framings(
    pool: ConnectionPool, name: str, answer: bytes, expected: tuple[int, bytes]
) -> None:
    async def script(head: bytes, number: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer)
        return True

    async with scripted(script) as (server, origin):
        assert await body_of(pool, origin) == expected, name
        assert await body_of(pool, origin) == expected, name  # and the connection still works
    assert server.connections == 1, name


async def test_body_until_close(pool: ConnectionPool) -> None:
    async def script(head: bytes, number: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it")
        return False

    async with scripted(script) as (_, origin):
        assert await body_of(pool, origin) == (200, b"all of it")


async def test_head_answer_has_no_body(pool: ConnectionPool) -> None:
    async def script(head: bytes, number: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        return True

    async with scripted(script) as (_, origin):
        assert await body_of(pool, origin, b"HEAD") == (200, b"")


async def test_body_cut_short_is_broken(pool: ConnectionPool) -> None:
    async def script(head: bytes, number: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
        return False

    async with scripted(script) as (_, origin):
        with pytest.raises(UpstreamBroken):
            await body_of(pool, origin)


@pytest.mark.parametrize("status", [600, 999])
async def test_a_status_http_has_not_is_no_answer(pool: ConnectionPool, status: int) -> None:
    """httptools reads any three digits; 600-999 is not HTTP (the ASGI path answers 502,
    as the fast lane does)."""

    async def script(head: bytes, number: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 %d Odd\r\nContent-Length: 2\r\n\r\nok" % status)
        return True

    async with scripted(script) as (_, origin):
        with pytest.raises(UpstreamUnavailable):
            await body_of(pool, origin)


async def test_silent_app_times_out() -> None:
    async def script(head: bytes, number: int, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(30)
        return False

    pool = ConnectionPool(connect_timeout=5, read_timeout=0.2)
    try:
        async with scripted(script) as (_, origin):
            with pytest.raises(UpstreamTimeout):
                await body_of(pool, origin)
    finally:
        pool.close()


async def test_nothing_listening() -> None:
    pool = ConnectionPool(connect_timeout=5, read_timeout=5)
    with pytest.raises(UpstreamUnavailable, match="cannot connect"):
        await pool.request(b"GET", Origin("http", "127.0.0.1", 9), b"/", [])


async def test_request_goes_out_as_given(pool: ConnectionPool) -> None:
    async def script(head: bytes, number: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(OK)
        return True

    async with scripted(script) as (server, origin):
        response = await pool.request(
            b"PUT", origin, b"/a%20b?c=d", [(b"host", b"apps.example.org"), (b"x-a", b"1")]
        )
        await response.read()
        response.release()
    assert server.requests[0] == (
        b"PUT /a%20b?c=d HTTP/1.1\r\nhost: apps.example.org\r\nx-a: 1\r\n\r\n"
    )


def test_origin_parse() -> None:
    assert Origin.parse("http://[::1]:8888") == Origin("http", "::1", 8888)
    assert Origin.parse("https://app.internal") == Origin("https", "app.internal", 443)
    with pytest.raises(ValueError, match="origin"):
        Origin.parse("ftp://x")
