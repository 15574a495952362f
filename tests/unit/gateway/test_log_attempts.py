"""Logs per attempt: a superseded attempt's late output is kept under its own attempt
(deduplicated by offset, within its own size limit), readers see each kernel's latest
attempt unless they ask for one, and only the node an attempt ran on may upload it.

The log service runs on a real (SQLite) database and the test run's Redis (its live
stream, which ``append`` writes to).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from gateway_rows import Rows
from redis.asyncio import Redis

from gateway.auth import Principal
from gateway.db.engine import SessionFactory
from gateway.db.models import Kernel, Usage
from gateway.domain.errors import Forbidden, NotFound
from gateway.domain.status import KernelStatus, SessionStatus
from gateway.services.logs import LIMIT_NOTE, LogChunkIn, LogService
from gateway.services.node_credentials import NodeCredentialService

S = SessionStatus
K = KernelStatus
ALICE = Principal(user_id="u1", name="alice", role="user")


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


async def _moved(db: SessionFactory, rows: Rows, status: S = S.RUNNING) -> None:
    """Session s1 whose kernel s1-k0 ran as attempt 1 on n1 and runs as attempt 2 on n2."""
    await rows.node("n1")
    await rows.node("n2", kernels=1)
    await rows.session(status, [(K.RUNNING, "n2")])
    async with db() as s, s.begin():
        kernel = await s.get(Kernel, "s1-k0")
        assert kernel is not None
        kernel.attempt = 2


def out(offset: int, data: bytes, stream: str = "stdout") -> LogChunkIn:
    return LogChunkIn(stream, offset, data)


async def _text(logs: LogService, attempt: int | None = None) -> str:
    return "".join(e["data"] for e in await logs.read(ALICE, "s1", None, attempt))


async def test_an_older_attempt_s_output_is_kept_under_it(
    db: SessionFactory, rows: Rows, redis: Redis
) -> None:
    await _moved(db, rows)
    logs = LogService(db, redis, max_bytes=1000)
    assert await logs.append("s1-k0", "s1", [out(0, b"two\n")], attempt=2) == {"stdout": 4}
    assert await logs.append("s1-k0", "s1", [out(0, b"late\n")], attempt=1) == {"stdout": 5}
    # repeated after a worker restart, overlapping what is held: only the new bytes
    again = [out(0, b"late\nmore\n"), out(0, b"err\n", "stderr")]
    assert await logs.append("s1-k0", "s1", again, attempt=1) == {"stdout": 10, "stderr": 4}
    assert await logs.append("s1-k0", "s1", again, attempt=1) == {"stdout": 10, "stderr": 4}
    # an older worker names no attempt: the current one
    assert await logs.append("s1-k0", "s1", [out(4, b"three\n")]) == {"stdout": 10}

    assert await _text(logs) == "two\nthree\n"
    assert await _text(logs, 2) == "two\nthree\n"
    assert await _text(logs, 1) == "late\nmore\nerr\n"
    entries = await logs.read(ALICE, "s1", {"stderr"}, 1)
    assert [(e["kernel"], e["attempt"], e["data"]) for e in entries] == [("s1-k0", 1, "err\n")]


async def test_an_attempt_the_gateway_never_placed_is_refused(
    db: SessionFactory, rows: Rows, redis: Redis
) -> None:
    await _moved(db, rows)
    logs = LogService(db, redis, max_bytes=1000)
    with pytest.raises(NotFound, match="has no attempt 3 \\(its latest is 2\\)"):
        await logs.append("s1-k0", "s1", [out(0, b"future\n")], attempt=3)
    with pytest.raises(NotFound, match="no kernel"):
        await logs.append("s1-k9", "s1", [out(0, b"who\n")], attempt=1)
    with pytest.raises(NotFound, match="session s1 has no attempt 3: its latest is 2"):
        await logs.read(ALICE, "s1", None, 3)
    assert await _text(logs) == ""


async def test_each_attempt_has_its_own_size_limit(
    db: SessionFactory, rows: Rows, redis: Redis
) -> None:
    await _moved(db, rows)
    logs = LogService(db, redis, max_bytes=6)
    await logs.append("s1-k0", "s1", [out(0, b"12345\n"), out(6, b"x\n")], attempt=2)
    await logs.append("s1-k0", "s1", [out(0, b"abcde\n"), out(6, b"y\n")], attempt=1)
    assert await _text(logs) == "12345\n" + LIMIT_NOTE.decode()
    assert await _text(logs, 1) == "abcde\n" + LIMIT_NOTE.decode()


async def test_following_shows_the_asked_attempt_or_the_latest(
    db: SessionFactory, rows: Rows, redis: Redis
) -> None:
    await _moved(db, rows, S.SUCCEEDED)  # ended: the stream replays what is held and ends
    logs = LogService(db, redis, max_bytes=1000)
    await logs.append("s1-k0", "s1", [out(0, b"old\n")], attempt=1)
    await logs.append("s1-k0", "s1", [out(0, b"new\n")], attempt=2)

    async def frames(attempt: int | None) -> list[str]:
        return [f async for f in logs.follow(ALICE, "s1", attempt) if f.startswith("event: log")]

    assert frames_data(await frames(None)) == ['"attempt":2,"data":"new\\n"']
    assert frames_data(await frames(1)) == ['"attempt":1,"data":"old\\n"']
    with pytest.raises(NotFound):
        await anext(logs.follow(ALICE, "s1", 3))


def frames_data(frames: list[str]) -> list[str]:
    return [f.split('"kernel":"s1-k0",', 1)[1].split("}", 1)[0] for f in frames]


async def test_only_the_node_an_attempt_ran_on_uploads_its_output(
    db: SessionFactory, rows: Rows
) -> None:
    await _moved(db, rows)
    ran = Usage(
        kernel_id="s1-k0",
        attempt=1,
        session_id="s1",
        owner_id="u1",
        resource_group="default",
        node_id="n1",
        started_at=datetime.now(UTC),
    )
    await rows.add(ran)
    nodes = NodeCredentialService(db)
    await nodes.check_kernel("n1", "s1-k0", 1)  # attempt 1 ran there
    await nodes.check_kernel("n2", "s1-k0", 2)  # attempt 2 is placed there
    await nodes.check_kernel("n2", "s1-k0")  # (an older worker: the current attempt)
    for node, attempt in [("n2", 1), ("n1", 2), ("n1", None)]:
        with pytest.raises(Forbidden, match="node n"):
            await nodes.check_kernel(node, "s1-k0", attempt)
