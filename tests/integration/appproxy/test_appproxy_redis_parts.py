"""The Redis side of the contract, against real Redis: routes, invalidation, activity."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from appproxy.activity import ActivityRecorder
from appproxy.inference.reports import LoadReporter
from appproxy.inference.store import EndpointStore
from appproxy.metrics import EndpointCounters
from appproxy.routes import RouteStore, RoutesUnavailable
from contract.endpoints import EndpointRoute, LoadReport, ReplicaTarget, write_endpoint_route
from contract.keys import ROUTE_CHANNEL, activity_key, endpoint_load_key, route_key
from contract.routes import RouteRecord, end_route, write_route
from jobgate.localnet import free_port, redis_server_binary, wait_port

pytestmark = pytest.mark.timeout(60)
SID = "0b5e7c1a-7d43-4cf4-9a51-2f0e3c8d9e11"


def record(
    upstream: str = "http://10.0.0.1:8888", status: str = "running", session_id: str = SID
) -> RouteRecord:
    return RouteRecord.model_validate(
        {
            "session_id": session_id,
            "owner_id": "u1",
            "status": status,
            "apps": {"jupyter": {"upstream": upstream}},
        }
    )


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def listening(store: RouteStore) -> AsyncIterator[None]:
    task = asyncio.create_task(store.run())
    try:
        await asyncio.wait_for(store.live.wait(), 10)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_write_route_publishes_and_stores(redis: Redis) -> None:
    pubsub = redis.pubsub()
    await pubsub.subscribe(ROUTE_CHANNEL)
    try:
        await write_route(redis, record())
        messages: list[dict[str, object]] = []
        while len(messages) < 2:
            message = await pubsub.get_message(timeout=5)
            assert message is not None
            messages.append(message)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    assert messages[1]["data"] == SID.encode()
    stored = RouteRecord.from_json(await redis.get(route_key(SID)))
    assert stored.apps["jupyter"].upstream == "http://10.0.0.1:8888"
    assert await redis.ttl(route_key(SID)) == -1  # a running session's route never expires


@pytest.mark.parametrize(
    ("name", "existing", "owner", "expected_owner"),
    [
        ("known route", True, None, "u1"),
        ("unknown route, owner given", False, "u9", "u9"),
    ],
)
async def test_end_route_keeps_an_ended_record(
    redis: Redis, name: str, existing: bool, owner: str | None, expected_owner: str
) -> None:
    if existing:
        await write_route(redis, record())
    await end_route(redis, SID, owner_id=owner, ttl=300)
    ended = RouteRecord.from_json(await redis.get(route_key(SID)))
    assert (ended.status, ended.owner_id, ended.apps) == ("ended", expected_owner, {}), name
    assert 0 < await redis.ttl(route_key(SID)) <= 300, name


async def test_end_route_of_unknown_session_without_owner_removes_it(redis: Redis) -> None:
    await end_route(redis, SID)
    assert await redis.get(route_key(SID)) is None


async def test_store_caches_until_told(redis: Redis) -> None:
    store = RouteStore(redis)
    await write_route(redis, record("http://10.0.0.1:1"))
    async with listening(store):
        first = await store.get(SID)
        assert first is not None
        assert first.apps["jupyter"].upstream == "http://10.0.0.1:1"
        await redis.set(route_key(SID), record("http://10.0.0.1:2").to_json())  # silently
        cached = await store.get(SID)
        assert cached is not None
        assert cached.apps["jupyter"].upstream == "http://10.0.0.1:1"
        await redis.publish(ROUTE_CHANNEL, SID)
        for _ in range(200):
            fresh = await store.get(SID)
            if fresh is not None and fresh.apps["jupyter"].upstream == "http://10.0.0.1:2":
                break
            await asyncio.sleep(0.025)
        else:
            raise AssertionError("invalidation never arrived")


async def test_store_expires_entries_as_a_safety_net(redis: Redis) -> None:
    store = RouteStore(redis, ttl=0.05)
    await write_route(redis, record("http://10.0.0.1:1"))
    async with listening(store):
        await store.get(SID)
        await redis.set(route_key(SID), record("http://10.0.0.1:2").to_json())  # silently
        await asyncio.sleep(0.1)  # longer than the TTL
        fresh = await store.get(SID)
    assert fresh is not None
    assert fresh.apps["jupyter"].upstream == "http://10.0.0.1:2"


async def test_store_is_bounded(redis: Redis) -> None:
    store = RouteStore(redis, max_entries=3)
    async with listening(store):
        for n in range(10):
            session_id = f"s{n}"
            await write_route(redis, record(session_id=session_id))
            assert await store.get(session_id) is not None
        assert len(store) == 3


async def test_store_without_subscription_reads_redis_every_time(redis: Redis) -> None:
    store = RouteStore(redis)  # run() never started: no invalidations would arrive
    await write_route(redis, record("http://10.0.0.1:1"))
    await store.get(SID)
    await redis.set(route_key(SID), record("http://10.0.0.1:2").to_json())
    fresh = await store.get(SID)
    assert fresh is not None
    assert fresh.apps["jupyter"].upstream == "http://10.0.0.1:2"
    assert len(store) == 0


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("not json", b"{oops"),
        (
            "bad upstream",
            b'{"session_id": "%s", "owner_id": "u", "apps": {"j": {"upstream": "x"}}}'
            % SID.encode(),
        ),
        ("another session's record", record(session_id="other").to_json().encode()),
    ],
)
async def test_bad_records_read_as_unknown_and_are_logged(
    redis: Redis, caplog: pytest.LogCaptureFixture, name: str, raw: bytes
) -> None:
    await redis.set(route_key(SID), raw)
    with caplog.at_level(logging.ERROR, logger="appproxy.routes"):
        assert await RouteStore(redis).get(SID) is None, name
    assert SID in caplog.text, name


async def test_store_reports_redis_down() -> None:
    dead = Redis.from_url("redis://127.0.0.1:9/0")
    try:
        with pytest.raises(RoutesUnavailable):
            await RouteStore(dead).get(SID)
    finally:
        await dead.aclose()


async def test_activity_is_written_once_per_flush(redis: Redis) -> None:
    recorder = ActivityRecorder(redis, interval=60)
    for _ in range(100):
        recorder.touch(SID)
    recorder.touch("other")
    await recorder.flush()
    value = int(await redis.get(activity_key(SID)))
    assert value > 1_700_000_000
    assert 0 < await redis.ttl(activity_key(SID)) <= 7 * 86_400
    assert await redis.get(activity_key("other")) is not None
    await redis.delete(activity_key(SID))
    await recorder.flush()  # nothing new: nothing written
    assert await redis.get(activity_key(SID)) is None


async def test_activity_survives_a_redis_restart(tmp_path: Path) -> None:
    port = free_port()
    own = Redis.from_url(f"redis://127.0.0.1:{port}/0")
    recorder = ActivityRecorder(own, interval=60)
    try:
        recorder.touch(SID)
        await recorder.flush()  # nobody listens yet: fails, logs, keeps the entry
        with redis_server_on(port, tmp_path):
            await recorder.flush()
            assert await own.get(activity_key(SID)) is not None
    finally:
        await own.aclose()


@contextlib.contextmanager
def redis_server_on(port: int, workdir: Path) -> Iterator[None]:
    proc = subprocess.Popen(
        [
            redis_server_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


async def _report_of(redis: Redis, endpoint_id: str, queued: int) -> LoadReport | None:
    raw = await redis.hget(endpoint_load_key(endpoint_id), "proxy-t")  # type: ignore[misc]
    report = LoadReport.model_validate_json(raw) if raw else None
    return report if report is not None and report.queued == queued else None


async def _soon(check: Callable[[], Awaitable[LoadReport | None]]) -> LoadReport:
    """The first report *check* accepts, within 10 s (far less than the hour between
    the reports the reporter makes on its own)."""
    for _ in range(200):
        found = await check()
        if found is not None:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError("no such load report")


async def test_a_request_leaving_the_queue_is_reported_at_once(redis: Redis) -> None:
    """`endpoints show` and the autoscaler read the proxies' load reports: when the queue
    empties (the request got its replica), the report says so at once, not a report
    interval later."""
    store = EndpointStore(redis, EndpointCounters(lambda session_id: None))
    one = ReplicaTarget(
        session_id="s0", index=0, revision=1, upstream="http://127.0.0.1:9", state="serving"
    )
    route = EndpointRoute(
        endpoint_id="ep-q", name="queued", owner_id="u1", replicas=(one,), concurrency_per_replica=1
    )
    await write_endpoint_route(redis, route)
    endpoint = await store.get("queued")
    assert endpoint is not None
    balancer = endpoint.balancer
    balancer.replicas["s0"].ready = True
    balancer.refresh()
    reporter = LoadReporter(redis, store, "proxy-t", interval=3600)
    store.set_load_listener(reporter.nudge)
    first = await balancer.acquire(1.0)  # the only slot
    waiting = asyncio.create_task(balancer.acquire(30.0))
    await asyncio.sleep(0)  # it queues (and waits)
    assert endpoint.load.queued == 1
    task = asyncio.create_task(reporter.run())  # its first report goes out at once
    try:
        await _soon(lambda: _report_of(redis, "ep-q", queued=1))
        balancer.release(first)  # the waiter takes the slot: nobody is queued any more
        assert (await waiting).session_id == "s0"
        report = await _soon(lambda: _report_of(redis, "ep-q", queued=0))
        assert report.in_flight == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await store.close()
