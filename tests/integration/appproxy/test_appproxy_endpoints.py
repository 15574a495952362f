"""Inference endpoint traffic through a real proxy to real replica processes.

Replicas are ``scripts/httpbench.py`` processes on loopback; routes are written to a real
Redis as the controller writes them. Each test runs one scenario and checks much of it
(uvloop only, as ``jobgate proxy serve`` runs: the session tests cover both loops).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from endpoint_harness import (
    ENDPOINT_ID,
    EXPIRED_TOKEN,
    TOKEN,
    ReplicaProcess,
    health,
    publish,
    ready,
    replica_of,
    replica_processes,
    route,
)
from proxy_harness import Proxy, ProxyFactory, problem
from waiting import until
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from appproxy.inference.store import Endpoint
from contract.endpoints import LoadReport, Probe, ReplicaTarget
from contract.keys import ENDPOINT_WAKE_CHANNEL, endpoint_load_key, endpoint_wake_key

pytestmark = pytest.mark.asyncio(loop_factories=["uvloop"])

StartReplica = Callable[[str], Awaitable[ReplicaProcess]]


@pytest.fixture
async def start_replica() -> AsyncIterator[StartReplica]:
    async with replica_processes() as start:
        yield start


def endpoint_of(proxy: Proxy, name: str = "iris") -> Endpoint:
    assert proxy.app.endpoints is not None
    for endpoint in proxy.app.endpoints:
        if endpoint.name == name:
            return endpoint
    raise AssertionError(f"the proxy does not know endpoint {name}")


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


async def test_routing_auth_streaming_and_reports(
    proxy: Proxy, proxy_factory: ProxyFactory, start_replica: StartReplica
) -> None:
    replica = await start_replica("a")
    await publish(proxy.redis, route(replica.target()))
    await ready(proxy.redis, replica)
    async with proxy.client() as client:
        # a token: the prefix is stripped, the token does not reach the model server
        answer = await client.post("/e/iris/invocations", content=b"[1,2]", headers=bearer(TOKEN))
        body = answer.json()
        assert answer.status_code == 200
        assert (body["replica"], body["path"], body["body"]) == ("a", "/invocations", "[1,2]")
        assert "authorization" not in body["headers"]
        assert body["headers"]["x-forwarded-prefix"] == "/e/iris"
        root = await client.get("/e/iris", headers=bearer(TOKEN))
        assert root.json()["path"] == "/"

        # no token, a wrong one, an expired one: 401, the same for an endpoint that is not there
        missing = await client.get("/e/iris/ping")
        assert missing.status_code == 401
        assert problem(missing)["type"] == "urn:jobgate:proxy:endpoint-token-required"
        assert missing.headers["www-authenticate"].startswith("Bearer")
        refusals = []
        for name, token in [
            ("iris", "jge_wrong"),
            ("iris", EXPIRED_TOKEN),
            ("ghost", TOKEN),
            ("ghost", "jge_wrong"),
        ]:
            refused = await client.get(f"/e/{name}/ping", headers=bearer(token))
            assert refused.status_code == 401
            refusals.append(refused.content)
        assert len(set(refusals)) == 1  # nothing tells an existing endpoint from a missing one
        # jobgate API keys: the owner and an admin pass, with the endpoints scope (a
        # read-only or a sessions key: 403); another user's endpoint is a 404
        for key, status in [
            ("jg_alice", 200),
            ("jg_alice_endpoints", 200),
            ("jg_alice_read", 403),
            ("jg_alice_sessions", 403),
            ("jg_root", 200),
            ("jg_mallory", 404),
            ("jg_nobody", 401),
        ]:
            answer = await client.get("/e/iris/invocations", headers=bearer(key))
            assert answer.status_code == status, key
            if status == 200:
                assert "authorization" not in answer.json()["headers"]
            elif status == 403:
                assert "'endpoints' scope" in problem(answer)["detail"], key
        assert (await client.get("/e/ghost/x", headers=bearer("jg_mallory"))).status_code == 404
        assert (await client.get("/e/ghost/x", headers=bearer("jg_root"))).status_code == 404

        # revoking: the controller writes the route without the token
        await publish(proxy.redis, route(replica.target(), tokens=()))

        async def revoked() -> bool:
            return (await client.get("/e/iris/ping", headers=bearer(TOKEN))).status_code == 401

        await until(revoked, timeout=10, interval=0.02, what="revoked token refused")

        # a public endpoint needs nothing; the caller's own Authorization reaches the server
        await publish(proxy.redis, route(replica.target(), public=True))

        async def public() -> bool:
            return (await client.get("/e/iris/ping")).status_code == 200

        await until(public, timeout=10, interval=0.02, what="public endpoint open")
        own = await client.get("/e/iris/x", headers={"Authorization": "Basic dTpw"})
        assert own.json()["headers"]["authorization"] == "Basic dTpw"

        # SSE passes through event by event, and counts as in flight until it ends
        endpoint = endpoint_of(proxy)
        events, in_flight = [], []
        async with client.stream("GET", "/e/iris/stream?n=3&interval_ms=300") as stream:
            assert stream.headers["content-type"] == "text/event-stream"
            async for line in stream.aiter_lines():
                if line.startswith("data:"):
                    in_flight.append(endpoint.load.in_flight)
                    events.append(line)
        assert events == ["data: 0 a", "data: 1 a", "data: 2 a"]
        assert in_flight[:2] == [1, 1]  # (the last event may come with the stream's end)
        assert endpoint.load.in_flight == 0

        metrics = (await client.get("/_jobgate/metrics")).text
        assert 'jobgate_endpoint_requests_total{endpoint="iris"}' in metrics
        assert 'jobgate_endpoint_ready_replicas{endpoint="iris"} 1.0' in metrics
        assert 'jobgate_proxy_requests_total{app="inference",session="session-a"}' in metrics

    # load reports: this proxy's own field, fresh, with its counts; the key expires
    served, quiet_since = endpoint.load.requests, time.time()
    assert served >= 6

    async def reported() -> bool:
        raw = await proxy.redis.hget(endpoint_load_key(ENDPOINT_ID), proxy.app.proxy_id)  # type: ignore[misc]
        return raw is not None and LoadReport.model_validate_json(raw).at > quiet_since

    await until(reported, timeout=10, interval=0.02, what="a load report")
    raw = await proxy.redis.hget(endpoint_load_key(ENDPOINT_ID), proxy.app.proxy_id)  # type: ignore[misc]
    report = LoadReport.model_validate_json(raw)
    assert report.requests_total == served
    assert report.per_replica_in_flight == {"session-a": 0}
    assert set(report.per_replica_rps) == {"session-a"}  # its req/s, for `endpoints show`
    assert report.in_flight == 0
    assert report.queued == 0
    assert time.time() - report.at < 5
    assert 0 < await proxy.redis.ttl(endpoint_load_key(ENDPOINT_ID)) <= 5

    # a WebSocket passes through (to an app that speaks it), and is in flight while open
    chat = ReplicaTarget(
        session_id="session-chat", index=0, revision=1, upstream=proxy.upstream.url
    )
    await publish(
        proxy.redis,
        route(
            chat.model_copy(update={"state": "serving"}),
            name="chat",
            endpoint_id="ep-chat",
            probe=Probe(path="/", interval_s=0.2),
        ),
    )
    await until(lambda: _known(proxy, "chat"), timeout=10, interval=0.02, what="chat in rotation")
    ws_url = proxy.url.replace("http://", "ws://") + "/e/chat/ws"
    async with connect(ws_url, additional_headers=bearer(TOKEN)) as ws:
        await ws.send("hello")
        assert await ws.recv() == "hello"
        assert endpoint_of(proxy, "chat").load.in_flight == 1
    with pytest.raises(InvalidStatus) as refused_ws:
        async with connect(ws_url, additional_headers=bearer("jge_wrong")):
            pass
    assert refused_ws.value.response.status_code == 401

    # subdomain mode: {name}.{base domain}, at the root of the host
    sub = await proxy_factory(proxy_base_domain="apps.test")
    await until(
        lambda: _known(sub),
        timeout=10,
        interval=0.02,
        what="the second proxy loads the endpoint from Redis at start",
    )
    async with sub.client() as client:
        answer = await client.get("/ping", headers={"Host": "iris.apps.test"})
        assert (answer.status_code, answer.text) == (200, "ok\n")
        echo = await client.get("/predict", headers={"Host": "iris.apps.test"})
        assert echo.json()["path"] == "/predict"


async def _known(proxy: Proxy, name: str = "iris") -> bool:
    assert proxy.app.endpoints is not None
    return any(e.name == name and e.balancer.ready_count for e in proxy.app.endpoints)


async def test_balancing_queue_and_retry_after(proxy: Proxy, start_replica: StartReplica) -> None:
    a, b = await start_replica("a"), await start_replica("b")
    await publish(proxy.redis, route(a.target(), b.target(index=1)))
    await ready(proxy.redis, a)
    await ready(proxy.redis, b)
    async with proxy.client() as client:
        # power of two choices spreads concurrent slow requests over both replicas
        answers = await asyncio.gather(
            *(client.get("/e/iris/x?delay_ms=100", headers=bearer(TOKEN)) for _ in range(40))
        )
        spread = collections.Counter(replica_of(r) for r in answers)
        assert set(spread) == {"a", "b"}
        assert min(spread.values()) >= 10, spread

        # one slot, a queue of two: 3 of 6 concurrent requests are answered, 3 refused
        await publish(proxy.redis, route(a.target(), concurrency_per_replica=1, queue_limit=2))
        await until(
            lambda: _one_replica(proxy),
            timeout=10,
            interval=0.02,
            what="the proxy takes the one-replica route",
        )
        endpoint = endpoint_of(proxy)
        tasks = []
        for _ in range(3):
            tasks.append(
                asyncio.create_task(client.get("/e/iris/x?delay_ms=300", headers=bearer(TOKEN)))
            )
        await until(
            lambda: _at(endpoint, in_flight=1, queued=2),
            timeout=10,
            interval=0.02,
            what="one in flight, two queued",
        )
        refused = [await client.get("/e/iris/x", headers=bearer(TOKEN)) for _ in range(3)]
        for answer in refused:
            assert answer.status_code == 503
            assert answer.headers["retry-after"] == "1"
            assert problem(answer)["type"] == "urn:jobgate:proxy:endpoint-busy"
        served = await asyncio.gather(*tasks)
        assert [replica_of(r) for r in served] == ["a", "a", "a"]
        assert endpoint.load.rejected == 3


async def _one_replica(proxy: Proxy) -> bool:
    return len(endpoint_of(proxy).balancer.replicas) == 1


async def _at(endpoint: Endpoint, *, in_flight: int, queued: int) -> bool:
    return endpoint.load.in_flight == in_flight and endpoint.load.queued == queued


async def test_readiness_starting_and_draining(proxy: Proxy, start_replica: StartReplica) -> None:
    a, b = await start_replica("a"), await start_replica("b")
    probe = Probe(path="/ping", interval_s=0.2, timeout_s=1.0, failure_threshold=2)
    # b is starting: probed (and ready) but given no traffic
    await publish(proxy.redis, route(a.target(), b.target("starting", 1), probe=probe))
    await ready(proxy.redis, a)
    await ready(proxy.redis, b)
    async with proxy.client() as client:

        async def replicas_seen(count: int) -> set[str]:
            answers = [await client.get("/e/iris/x", headers=bearer(TOKEN)) for _ in range(count)]
            return {replica_of(r) for r in answers}

        assert await replicas_seen(10) == {"a"}

        # both serving; then a's readiness probe fails and it leaves rotation
        await publish(proxy.redis, route(a.target(), b.target(index=1), probe=probe))
        await until(
            lambda: _ready_count(proxy, 2),
            timeout=10,
            interval=0.02,
            what="two replicas in rotation",
        )
        await a.set_ping(500)

        async def a_unready() -> bool:
            verdict = await health(proxy.redis, a)
            return verdict is not None and not verdict.ready

        await until(a_unready, timeout=10, interval=0.02, what="a reported not ready")
        verdict = await health(proxy.redis, a)
        assert verdict is not None
        assert verdict.reason == "HTTP 500 from /ping"
        assert verdict.proxy_id == proxy.app.proxy_id
        assert await replicas_seen(10) == {"b"}
        await a.set_ping(200)
        await ready(proxy.redis, a)
        await until(
            lambda: _ready_count(proxy, 2), timeout=10, interval=0.02, what="a back in rotation"
        )

        # draining: a's in-flight request finishes, new ones all go to b
        await publish(proxy.redis, route(a.target(), b.target("starting", 1), probe=probe))
        await until(
            lambda: _ready_count(proxy, 1), timeout=10, interval=0.02, what="b out of rotation"
        )
        slow = asyncio.create_task(client.get("/e/iris/x?delay_ms=600", headers=bearer(TOKEN)))
        await until(
            lambda: _in_flight(proxy, a.session_id),
            timeout=10,
            interval=0.02,
            what="the slow request on a",
        )
        await publish(proxy.redis, route(a.target("draining"), b.target(index=1), probe=probe))
        await until(
            lambda: _state(proxy, a.session_id, "draining"),
            timeout=10,
            interval=0.02,
            what="a draining",
        )
        assert await replicas_seen(10) == {"b"}
        assert replica_of(await slow) == "a"


async def _ready_count(proxy: Proxy, count: int) -> bool:
    return endpoint_of(proxy).balancer.ready_count == count


async def _in_flight(proxy: Proxy, session_id: str) -> bool:
    return endpoint_of(proxy).balancer.replicas[session_id].in_flight == 1


async def _state(proxy: Proxy, session_id: str, state: str) -> bool:
    return endpoint_of(proxy).balancer.replicas[session_id].state == state


async def test_retry_on_refused_connection(proxy: Proxy, start_replica: StartReplica) -> None:
    """A replica that dies between probes: idempotent requests go to another replica."""
    slow_probe = Probe(path="/ping", interval_s=60.0)
    b = await start_replica("b")

    async def with_dead_replica(name: str) -> ReplicaProcess:
        dead = await start_replica(name)
        await publish(proxy.redis, route(dead.target(), b.target(index=1), probe=slow_probe))
        await ready(proxy.redis, dead)
        await ready(proxy.redis, b)
        await until(
            lambda: _ready_count(proxy, 2),
            timeout=10,
            interval=0.02,
            what=f"{name} and b in rotation",
        )
        await dead.kill()
        return dead

    async def refused(replica: ReplicaProcess) -> bool:
        verdict = await health(proxy.redis, replica)
        return verdict is not None and not verdict.ready

    async with proxy.client() as client:
        # GET (and POST with an Idempotency-Key): every request is answered by b
        for method, headers in [("GET", {}), ("POST", {"Idempotency-Key": "k1"})]:
            dead = await with_dead_replica(f"dead-{method.lower()}")
            for _ in range(40):
                answer = await client.request(
                    method, "/e/iris/x", headers={**bearer(TOKEN), **headers}
                )
                assert replica_of(answer) == "b"
                if await refused(dead):
                    break
            verdict = await health(proxy.redis, dead)
            assert verdict is not None
            assert verdict.reason == "a request could not connect"

        # POST without an Idempotency-Key: not retried, the caller gets 502
        dead = await with_dead_replica("dead-post")
        statuses = []
        for _ in range(40):
            answer = await client.post("/e/iris/x", headers=bearer(TOKEN), content=b"x")
            statuses.append(answer.status_code)
            if answer.status_code == 502:
                assert problem(answer)["type"] == "urn:jobgate:proxy:app-not-answering"
                break
        assert statuses[-1] == 502
        assert set(statuses[:-1]) <= {200}
        assert await refused(dead)
        # and it is out of rotation now
        after = [await client.post("/e/iris/x", headers=bearer(TOKEN)) for _ in range(5)]
        assert {replica_of(r) for r in after} == {"b"}

        # killed under load: its in-flight request fails, and the failure gets it probed at
        # once, so not even a POST without an Idempotency-Key goes to it afterwards
        killed = await start_replica("killed")
        only_killed = (killed.target(), b.target("starting", 1))
        await publish(proxy.redis, route(*only_killed, probe=slow_probe))
        await ready(proxy.redis, killed)
        await until(
            lambda: _ready_count(proxy, 1),
            timeout=10,
            interval=0.02,
            what="only killed in rotation",
        )
        in_flight = asyncio.create_task(  # a POST: not re-sent elsewhere when it breaks
            client.post("/e/iris/x?delay_ms=5000", headers=bearer(TOKEN), content=b"x")
        )
        await until(
            lambda: _in_flight(proxy, killed.session_id),
            timeout=10,
            interval=0.02,
            what="a request on it",
        )
        await publish(proxy.redis, route(killed.target(), b.target(index=1), probe=slow_probe))
        await until(
            lambda: _ready_count(proxy, 2),
            timeout=10,
            interval=0.02,
            what="killed and b in rotation",
        )
        await killed.kill()
        assert (await in_flight).status_code == 502
        await until(
            lambda: refused(killed), timeout=10, interval=0.02, what="killed out of rotation"
        )
        verdict = await health(proxy.redis, killed)
        assert verdict is not None
        assert verdict.reason.startswith("after a failed request: ")
        after = [await client.post("/e/iris/x", headers=bearer(TOKEN)) for _ in range(10)]
        assert {replica_of(r) for r in after} == {"b"}


async def test_hold_at_zero_wakes_once(proxy: Proxy, start_replica: StartReplica) -> None:
    pubsub = proxy.redis.pubsub()
    await pubsub.subscribe(ENDPOINT_WAKE_CHANNEL)
    assert (await pubsub.get_message(timeout=5.0))["type"] == "subscribe"
    await publish(proxy.redis, route(wake_timeout_s=30.0))
    await until(
        lambda: _has(proxy, "iris"), timeout=10, interval=0.02, what="the proxy knows the endpoint"
    )
    endpoint = endpoint_of(proxy)
    async with httpx.AsyncClient(base_url=proxy.url, timeout=40.0) as client:
        burst = [
            asyncio.create_task(client.post("/e/iris/invocations", headers=bearer(TOKEN)))
            for _ in range(8)
        ]
        await until(
            lambda: _at(endpoint, in_flight=0, queued=8),
            timeout=10,
            interval=0.02,
            what="8 requests held",
        )
        woken_at = await proxy.redis.get(endpoint_wake_key(ENDPOINT_ID))
        assert woken_at is not None
        assert abs(int(woken_at) - time.time()) < 60
        assert 0 < await proxy.redis.ttl(endpoint_wake_key(ENDPOINT_ID)) <= 30
        wakes = await _messages(pubsub)
        assert wakes == [ENDPOINT_ID]  # one wake-up for the burst

        # the controller starts a replica and writes it (starting): once the proxy has probed
        # it ready, every held request is served, without waiting for its promotion
        replica = await start_replica("a")
        await publish(proxy.redis, route(replica.target("starting"), wake_timeout_s=30.0))
        answers = await asyncio.gather(*burst)
        assert [replica_of(r) for r in answers] == ["a"] * 8
        assert endpoint.load.held == 8
        assert endpoint.load.rejected == 0
        # no second wake for the burst: the one message is the ready verdict's poke, which
        # has the controller promote the replica at once (the verdict is stored first)
        assert await _messages(pubsub) == [ENDPOINT_ID]
        verdict = await health(proxy.redis, replica)
        assert verdict is not None
        assert verdict.ready
        assert await proxy.redis.get(endpoint_wake_key(ENDPOINT_ID)) == woken_at

        # nobody answers the wake within wake_timeout_s: 503 with Retry-After
        await publish(proxy.redis, route(name="cold", endpoint_id="ep-cold", wake_timeout_s=0.3))
        await until(
            lambda: _has(proxy, "cold"),
            timeout=10,
            interval=0.02,
            what="the proxy knows endpoint cold",
        )
        late = await client.get("/e/cold/ping", headers=bearer(TOKEN))
        assert late.status_code == 503
        assert late.headers["retry-after"] == "5"
        assert problem(late)["type"] == "urn:jobgate:proxy:endpoint-starting"
    await pubsub.aclose()  # type: ignore[no-untyped-call]


async def _has(proxy: Proxy, name: str) -> bool:
    assert proxy.app.endpoints is not None
    return any(e.name == name for e in proxy.app.endpoints)


async def _messages(pubsub: object) -> list[str]:
    out: list[str] = []
    while True:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)  # type: ignore[attr-defined]
        if message is None:
            return out
        out.append(message["data"].decode())
