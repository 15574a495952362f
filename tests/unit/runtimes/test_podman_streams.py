"""until_done: follow a stream until it ends or the container's exit is known."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from plugins.runtimes.podman.streams import until_done


class Source:
    """An async iterator fed by the test, recording whether it was closed."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[int | None] = asyncio.Queue()
        self.closed = False
        self.starved = asyncio.Event()  # set when a read finds nothing and has to wait

    def __aiter__(self) -> AsyncIterator[int]:
        return self

    async def __anext__(self) -> int:
        if self.queue.empty():
            self.starved.set()
        item = await self.queue.get()
        if item is None:
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        self.closed = True


async def collect(source: Source, done: asyncio.Future[None]) -> list[int]:
    return [item async for item in until_done(source, done)]


async def test_items_until_the_source_ends() -> None:
    source = Source()
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for item in (1, 2, None):
        source.queue.put_nowait(item)
    assert await collect(source, done) == [1, 2]
    assert source.closed
    assert not done.done()


async def test_stops_when_done_resolves_while_the_source_waits() -> None:
    source = Source()
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    source.queue.put_nowait(1)
    reader = asyncio.create_task(collect(source, done))
    await source.starved.wait()  # it took the first item and waits for the next
    done.set_result(None)
    assert await reader == [1]
    assert source.closed
    source.queue.put_nowait(2)  # what comes later is left for the final read
    assert source.queue.qsize() == 1


async def test_an_item_is_never_lost_when_both_are_ready() -> None:
    source = Source()
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    for item in (7, 8):
        source.queue.put_nowait(item)
    got = await collect(source, done)
    left = [source.queue.get_nowait() for _ in range(source.queue.qsize())]
    assert got + left == [7, 8]  # taken from the source means passed on; the rest stays
    assert source.closed


async def test_a_cancelled_reader_closes_the_source() -> None:
    source = Source()
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    reader = asyncio.create_task(collect(source, done))
    await source.starved.wait()
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader
    assert source.closed
    source.queue.put_nowait(5)
    for _ in range(3):  # a read left running in the background would take it now
        await asyncio.sleep(0)
    assert source.queue.qsize() == 1
