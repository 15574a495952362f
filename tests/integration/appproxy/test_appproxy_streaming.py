"""Bodies flow through, not into, the proxy: SSE, chunked uploads, large downloads."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator

import pytest
from proxy_harness import SESSION, Proxy

pytestmark = pytest.mark.timeout(60)

# Every wait below is a guard against a hang (a buffering proxy deadlocks these tests),
# never a measurement: a test fails on what arrives, not on how fast.
HANG_GUARD = 15.0


async def next_data_line(lines: AsyncIterator[str]) -> str:
    async for line in lines:
        if line.startswith("data:"):
            return line
    raise AssertionError("the stream ended")


async def test_sse_events_arrive_one_by_one(proxy: Proxy) -> None:
    state = proxy.upstream.state
    async with (
        proxy.client(cookies=proxy.cookie()) as client,
        client.stream("GET", f"/s/{SESSION}/echo/sse") as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        lines = response.aiter_lines()
        # The app sends the second event only once we have the first through the proxy.
        first = await asyncio.wait_for(next_data_line(lines), HANG_GUARD)
        assert first == "data: first"
        assert not state.release_second_event.is_set()
        state.release_second_event.set()
        second = await asyncio.wait_for(next_data_line(lines), HANG_GUARD)
        assert second == "data: second"
    # Leaving the stream closed our connection: the proxy must hang up on the app too.
    await asyncio.wait_for(state.sse_client_gone.wait(), HANG_GUARD)


async def test_chunked_upload_reaches_the_app_while_being_sent(proxy: Proxy) -> None:
    state = proxy.upstream.state
    chunk = bytes(range(256)) * 256  # 64 KiB
    count = 160  # 10 MiB
    expected = hashlib.sha256(chunk * count).hexdigest()

    async def body() -> AsyncIterator[bytes]:
        yield chunk
        # Only go on once the app has the first chunk: a buffering proxy never gets here.
        await asyncio.wait_for(state.upload_first_chunk.wait(), HANG_GUARD)
        for _ in range(count - 1):
            yield chunk

    async with proxy.client(cookies=proxy.cookie()) as client:
        response = await client.post(f"/s/{SESSION}/echo/upload", content=body())
    assert response.status_code == 200
    assert response.json() == {"size": len(chunk) * count, "sha256": expected}


async def test_sized_body_keeps_its_content_length(proxy: Proxy) -> None:
    async with proxy.client(cookies=proxy.cookie()) as client:
        response = await client.put(f"/s/{SESSION}/echo/file", content=b"a" * 1000)
    seen = json.loads(response.content)
    headers = {k.lower(): v for k, v in seen["headers"]}
    assert seen["method"] == "PUT"
    assert seen["body_length"] == 1000
    assert headers["content-length"] == "1000"
    assert "transfer-encoding" not in headers


async def test_large_download_arrives_whole(proxy: Proxy) -> None:
    size = 50 * 1024 * 1024 + 123
    block = bytes(range(256)) * 256
    expected = hashlib.sha256()
    left = size
    while left:
        piece = block[: min(len(block), left)]
        expected.update(piece)
        left -= len(piece)
    digest = hashlib.sha256()
    received = 0
    async with (
        proxy.client(cookies=proxy.cookie()) as client,
        client.stream("GET", f"/s/{SESSION}/echo/download/{size}") as response,
    ):
        async for part in response.aiter_raw():
            digest.update(part)
            received += len(part)
    assert received == size
    assert digest.hexdigest() == expected.hexdigest()


async def test_head_and_methods_pass_through(proxy: Proxy) -> None:
    async with proxy.client(cookies=proxy.cookie()) as client:
        head = await client.head(f"/s/{SESSION}/echo/x")
        delete = await client.delete(f"/s/{SESSION}/echo/x")
    assert head.status_code == 200
    assert head.content == b""
    assert json.loads(delete.content)["method"] == "DELETE"
