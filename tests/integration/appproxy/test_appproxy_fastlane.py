"""The fast lane (appproxy/fastlane/) against the ASGI path: the same behaviour, both ways.

Every test runs with the lane on (the default) and off (``proxy_fast_lane=False``), and
checks that the lane took the requests it should (``FastLane.taken``) - so a behaviour
that differs between the two paths fails one of the two runs. The replicas are the
sample app of proxy_harness (echo, SSE on cue, streamed uploads), one aiohttp site each.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
from aiohttp import web
from endpoint_harness import TOKEN, publish, route
from proxy_harness import AppServer, AppState, Proxy, ProxyFactory, SampleApp, problem, start_site
from waiting import until

from appproxy.inference.balancer import Replica
from appproxy.inference.store import Endpoint
from contract.endpoints import Probe, ReplicaTarget, TokenGrant, token_digest

AUTH = {"Authorization": f"Bearer {TOKEN}"}
# probes find a replica ready at once, then leave it alone: only requests notice a death
QUIET_PROBE = Probe(path="/ping", interval_s=60, timeout_s=1.0)

StartEndpoint = Callable[..., Awaitable[tuple[Proxy, Endpoint]]]


@pytest.fixture(params=[True, False], ids=["fast-lane", "asgi"])
def fast_lane(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
async def sites() -> AsyncIterator[Callable[[], Awaitable[tuple[web.AppRunner, str, AppState]]]]:
    """More sample apps (replicas that a test may stop)."""
    async with AsyncExitStack() as stack:

        async def start() -> tuple[web.AppRunner, str, AppState]:
            state = AppState()
            runner, url = await start_site(SampleApp(state).web)
            stack.push_async_callback(runner.cleanup)
            return runner, url, state

        yield start


@pytest.fixture
def start_endpoint(proxy_factory: ProxyFactory, fast_lane: bool) -> StartEndpoint:
    async def start(*upstreams: str, **settings: Any) -> tuple[Proxy, Endpoint]:
        proxy = await proxy_factory(proxy_fast_lane=fast_lane, **settings)
        assert (proxy.app.fast_lane is not None) == fast_lane
        targets = [
            ReplicaTarget(session_id=f"replica-{i}", index=i, revision=1, upstream=u)
            for i, u in enumerate(upstreams)
        ]
        return proxy, await _published(proxy, targets)

    return start


async def _published(proxy: Proxy, targets: list[ReplicaTarget], **route_settings: Any) -> Endpoint:
    """The endpoint once its route (with *targets*) is published and every replica ready."""
    await publish(proxy.redis, route(*targets, probe=QUIET_PROBE, **route_settings))
    endpoint = await _endpoint(proxy)

    async def all_ready() -> bool:
        return endpoint.balancer.ready_count == len(targets)

    await until(all_ready, timeout=10, interval=0.02, what="replicas ready")
    return endpoint


async def _endpoint(proxy: Proxy) -> Endpoint:
    store = proxy.app.endpoints
    assert store is not None

    async def known() -> bool:
        return store.peek("iris") is not None

    await until(known, timeout=10, interval=0.02, what="endpoint known")
    found = store.peek("iris")
    assert found is not None
    return found


def taken(proxy: Proxy) -> int:
    return proxy.app.fast_lane.taken if proxy.app.fast_lane is not None else 0


def expect_taken(proxy: Proxy, fast_lane: bool, count: int) -> None:
    """The lane served ``count`` requests when on (and none can when off)."""
    assert taken(proxy) == (count if fast_lane else 0)


def replicas(endpoint: Endpoint) -> list[Replica]:
    return sorted(endpoint.balancer.replicas.values(), key=lambda r: r.index)


async def all_released(endpoint: Endpoint) -> None:
    async def idle() -> bool:
        return endpoint.load.in_flight == 0 and all(
            r.in_flight == 0 and r.stats.in_flight == 0 for r in replicas(endpoint)
        )

    await until(idle, timeout=10, interval=0.02, what="every slot released")


def header_values(body: dict[str, Any], name: str) -> list[str]:
    return [v for k, v in body["headers"] if k.lower() == name]


async def test_headers_forwarded_and_stripped_as_on_the_asgi_path(
    app_server: AppServer, start_endpoint: StartEndpoint, fast_lane: bool
) -> None:
    proxy, endpoint = await start_endpoint(app_server.url)
    async with proxy.client() as client:
        answer = await client.get(
            "/e/iris/v1/models?x=1%202",
            headers={
                **AUTH,
                "Cookie": "jobgate_auth=secret; app_cookie=kept",
                "X-Forwarded-For": "6.6.6.6",
                "X-Forwarded-Proto": "https",
                "Connection": "keep-alive, X-Named",
                "X-Named": "hop",
                "X-Custom": "passes",
                "Accept": "application/json",
                # hop-by-hop whatever Connection says (no "upgrade" there: not a handshake)
                "TE": "trailers",
                "Trailer": "X-Checksum",
                "Upgrade": "h2c",
                "Proxy-Authorization": "Basic cHJveHk6c2VjcmV0",
                "Proxy-Connection": "keep-alive",
                "Keep-Alive": "timeout=5",
                "X-Real-IP": "6.6.6.6",
                "Forwarded": "for=6.6.6.6",
            },
        )
    assert answer.status_code == 200
    body = answer.json()
    assert body["raw_path"] == "/v1/models?x=1%202"  # prefix gone, query as sent
    assert header_values(body, "authorization") == []  # an endpoint token is ours
    assert header_values(body, "cookie") == ["app_cookie=kept"]
    assert header_values(body, "x-forwarded-for") == ["127.0.0.1"]  # not from a trusted peer
    assert header_values(body, "x-forwarded-proto") == ["http"]
    assert header_values(body, "x-forwarded-prefix") == ["/e/iris"]
    assert header_values(body, "host") == [proxy.url.removeprefix("http://")]
    assert header_values(body, "x-named") == []
    assert header_values(body, "x-custom") == ["passes"]
    for name in ("te", "trailer", "upgrade", "proxy-authorization", "proxy-connection"):
        assert header_values(body, name) == [], name
    for name in ("keep-alive", "x-real-ip", "forwarded", "connection"):
        assert header_values(body, name) == [], name
    # the answer: hop-by-hop headers and those its Connection names are dropped
    assert answer.headers["set-cookie"] == "app_cookie=1; Path=/"
    assert "x-hop" not in answer.headers
    assert "keep-alive" not in answer.headers
    assert answer.headers["content-type"].startswith("application/json")
    expect_taken(proxy, fast_lane, 1)
    await all_released(endpoint)


async def test_public_endpoint_passes_foreign_authorization(
    app_server: AppServer, proxy_factory: ProxyFactory, fast_lane: bool
) -> None:
    proxy = await proxy_factory(proxy_fast_lane=fast_lane)
    target = ReplicaTarget(session_id="replica-0", index=0, revision=1, upstream=app_server.url)
    await _published(proxy, [target], public=True)
    async with proxy.client() as client:
        plain = await client.get("/e/iris/a", headers={"Authorization": "Basic dXNlcjpwdw=="})
        token = await client.get("/e/iris/b", headers=AUTH)
    assert header_values(plain.json(), "authorization") == ["Basic dXNlcjpwdw=="]
    assert header_values(token.json(), "authorization") == []
    expect_taken(proxy, fast_lane, 2)


async def test_a_repeated_request_head_still_meets_a_revoked_or_expired_token(
    app_server: AppServer, proxy_factory: ProxyFactory, fast_lane: bool
) -> None:
    proxy = await proxy_factory(proxy_fast_lane=fast_lane)
    target = ReplicaTarget(session_id="replica-0", index=0, revision=1, upstream=app_server.url)
    short = "jge_short-lived-0123456789"
    expires = time.time() + 1.0
    grants = (
        TokenGrant(id="tok-1", digest=token_digest(TOKEN)),
        TokenGrant(id="tok-2", digest=token_digest(short), expires_at=expires),
    )
    endpoint = await _published(proxy, [target], tokens=grants)
    async with proxy.client() as client:  # one keep-alive connection, the same head again
        short_auth = {"Authorization": f"Bearer {short}"}
        for _ in range(2):  # (the second head carries the app's cookie, then no change)
            assert (await client.get("/e/iris/x", headers=short_auth)).status_code == 200
        await asyncio.sleep(max(0.0, expires - time.time()) + 0.05)
        assert (await client.get("/e/iris/x", headers=short_auth)).status_code == 401
        assert (await client.get("/e/iris/x", headers=AUTH)).status_code == 200
        # revoked: the route changes, and the same head is refused from then on
        await publish(proxy.redis, route(target, tokens=grants[1:], probe=QUIET_PROBE))

        async def applied() -> bool:
            return len(endpoint.route.tokens) == 1

        await until(applied, timeout=10, interval=0.02, what="the new route applied")
        assert (await client.get("/e/iris/x", headers=AUTH)).status_code == 401
    expect_taken(proxy, fast_lane, 3)


async def test_a_repeated_head_meets_a_public_endpoint_made_private_and_other_credentials(
    app_server: AppServer, proxy_factory: ProxyFactory, fast_lane: bool
) -> None:
    proxy = await proxy_factory(proxy_fast_lane=fast_lane)
    target = ReplicaTarget(session_id="replica-0", index=0, revision=1, upstream=app_server.url)
    endpoint = await _published(proxy, [target], public=True)
    async with proxy.client() as client:  # one keep-alive connection throughout
        for _ in range(2):
            assert (await client.get("/e/iris/x")).status_code == 200
        wrong = {"Authorization": "Bearer jge_not-a-token"}
        assert (await client.get("/e/iris/x", headers=wrong)).status_code == 200  # public
        await publish(proxy.redis, route(target, public=False, probe=QUIET_PROBE))

        async def private() -> bool:
            return not endpoint.route.public

        await until(private, timeout=10, interval=0.02, what="the endpoint private")
        assert (await client.get("/e/iris/x")).status_code == 401
        assert (await client.get("/e/iris/x", headers=wrong)).status_code == 401
        assert (await client.get("/e/iris/x", headers=AUTH)).status_code == 200
    expect_taken(proxy, fast_lane, 4)


async def test_keep_alive_both_ways_and_counters(
    app_server: AppServer, start_endpoint: StartEndpoint, fast_lane: bool
) -> None:
    proxy, endpoint = await start_endpoint(app_server.url)
    (replica,) = replicas(endpoint)
    requests_before, taken_before = replica.stats.requests, replica.taken
    async with proxy.client() as client:
        peers = set()
        for i in range(20):
            answer = await client.post("/e/iris/invocations", content=b"x" * i, headers=AUTH)
            assert answer.status_code == 200
            assert answer.json()["body_length"] == i
            peers.add(answer.json()["peer"])
    assert len(peers) == 1  # one pooled connection to the replica, reused
    assert replica.stats.requests - requests_before == 20
    assert replica.taken - taken_before == 20
    assert endpoint.load.requests == 20  # the load report's request count (req/s)
    assert replica.stats.failures == 0
    expect_taken(proxy, fast_lane, 20)
    await all_released(endpoint)


async def test_streamed_answer_arrives_event_by_event_and_a_leaving_client_frees_the_slot(
    app_server: AppServer, start_endpoint: StartEndpoint, fast_lane: bool
) -> None:
    proxy, endpoint = await start_endpoint(app_server.url)
    async with proxy.client() as client, client.stream("GET", "/e/iris/sse", headers=AUTH) as sse:
        assert sse.headers["content-type"] == "text/event-stream"
        lines = sse.aiter_lines()
        assert await asyncio.wait_for(anext(lines), 10) == "data: first"
        assert endpoint.load.in_flight == 1  # the stream holds its slot
        app_server.state.release_second_event.set()
        while (line := await asyncio.wait_for(anext(lines), 10)) == "":
            pass
        assert line == "data: second"
    await asyncio.wait_for(app_server.state.sse_client_gone.wait(), 10)
    await all_released(endpoint)
    expect_taken(proxy, fast_lane, 1)


async def test_large_upload_streams_to_the_replica(
    app_server: AppServer, start_endpoint: StartEndpoint, fast_lane: bool
) -> None:
    proxy, endpoint = await start_endpoint(app_server.url)
    first, rest = b"a" * 65536, bytes(range(256)) * 16384  # 64 KiB, then 4 MiB

    async def body() -> AsyncIterator[bytes]:
        yield first
        # only a streamed body gets here: the replica has seen the first chunk already
        await asyncio.wait_for(app_server.state.upload_first_chunk.wait(), 10)
        yield rest

    headers = {**AUTH, "Content-Length": str(len(first) + len(rest))}
    async with proxy.client() as client:
        answer = await client.post("/e/iris/upload", content=body(), headers=headers)
    assert answer.json() == {
        "size": len(first) + len(rest),
        "sha256": hashlib.sha256(first + rest).hexdigest(),
    }
    expect_taken(proxy, fast_lane, 1)
    await all_released(endpoint)


async def test_large_download_arrives_whole(
    app_server: AppServer, start_endpoint: StartEndpoint, fast_lane: bool
) -> None:
    proxy, endpoint = await start_endpoint(app_server.url)
    size = 8 * 1024 * 1024
    async with proxy.client() as client:
        answer = await client.get(f"/e/iris/download/{size}", headers=AUTH)
    assert answer.content == (bytes(range(256)) * 256 * 129)[:size]
    expect_taken(proxy, fast_lane, 1)
    await all_released(endpoint)


async def test_refused_connect_retried_on_another_replica(
    sites: Callable[[], Awaitable[tuple[web.AppRunner, str, AppState]]],
    start_endpoint: StartEndpoint,
    fast_lane: bool,
) -> None:
    dying, dying_url, _ = await sites()
    _, live_url, _ = await sites()
    proxy, endpoint = await start_endpoint(dying_url, live_url)
    dead, live = replicas(endpoint)
    await dying.cleanup()  # its port now refuses connections; the probes do not look again
    async with proxy.client() as client:
        for _ in range(200):  # p2c picks the dead one half of the time, until it fails once
            answer = await client.get("/e/iris/ping", headers=AUTH)
            assert answer.status_code == 200, answer.text
            assert answer.json()["port"] == int(live_url.rsplit(":", 1)[1])
            if dead.stats.failures:
                break
    assert dead.stats.failures == 1
    assert not dead.ready  # the failed connect took it out of rotation
    assert endpoint.load.requests == live.stats.requests  # each request answered once, by it
    await all_released(endpoint)
    assert taken(proxy) == (endpoint.load.requests if fast_lane else 0)


async def test_no_replica_answering_is_the_502_page(
    sites: Callable[[], Awaitable[tuple[web.AppRunner, str, AppState]]],
    start_endpoint: StartEndpoint,
    fast_lane: bool,
) -> None:
    dying, url, _ = await sites()
    proxy, endpoint = await start_endpoint(url)
    (replica,) = replicas(endpoint)
    await dying.cleanup()
    async with proxy.client() as client:
        answer = await client.post(
            "/e/iris/invocations", content=b"{}", headers={**AUTH, "Accept": "application/json"}
        )
        assert answer.status_code == 502
        assert problem(answer)["type"] == "urn:jobgate:proxy:app-not-answering"
        assert answer.headers["cache-control"] == "no-store"
        # the client's connection is still good for the next request
        again = await client.get("/e/other/ping", headers=AUTH)
        assert again.status_code == 401
    assert replica.stats.failures == 1
    assert taken(proxy) == (1 if fast_lane else 0)
    await all_released(endpoint)


async def test_a_status_http_has_not_is_the_502_page(
    start_endpoint: StartEndpoint, fast_lane: bool
) -> None:
    """httptools reads any three digits as a status: a replica's 999 is no answer."""

    async def replica(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while head := await reader.readuntil(b"\r\n\r\n"):
                status = 200 if head.startswith(b"GET /ping ") else 999  # ready to the prober
                writer.write(b"HTTP/1.1 %d Odd\r\ncontent-length: 2\r\n\r\nok" % status)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(replica, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        proxy, endpoint = await start_endpoint(f"http://127.0.0.1:{port}")
        async with proxy.client() as client:
            answer = await client.get("/e/iris/x", headers={**AUTH, "Accept": "application/json"})
        assert answer.status_code == 502
        assert problem(answer)["type"] == "urn:jobgate:proxy:app-not-answering"
        (only,) = replicas(endpoint)
        assert only.stats.failures == 1
        await all_released(endpoint)
        expect_taken(proxy, fast_lane, 1)


async def test_silent_replica_times_out_as_on_the_asgi_path(
    app_server: AppServer, start_endpoint: StartEndpoint, fast_lane: bool
) -> None:
    proxy, endpoint = await start_endpoint(app_server.url, proxy_upstream_read_timeout=0.3)
    async with proxy.client() as client, client.stream("GET", "/e/iris/sse", headers=AUTH) as sse:
        lines = sse.aiter_lines()
        assert await asyncio.wait_for(anext(lines), 10) == "data: first"
        with pytest.raises(httpx.RemoteProtocolError):  # cut: the body is not complete
            async for _ in lines:
                pass
    (replica,) = replicas(endpoint)
    assert replica.stats.failures == 1
    await all_released(endpoint)
    expect_taken(proxy, fast_lane, 1)


async def test_what_the_lane_leaves_to_the_asgi_path(
    app_server: AppServer, start_endpoint: StartEndpoint, fast_lane: bool
) -> None:
    proxy, endpoint = await start_endpoint(app_server.url)
    async with proxy.client() as client:
        # an owner's API key needs the user look-up; a chunked body; HEAD; unknown endpoint
        key = await client.get("/e/iris/ping", headers={"Authorization": "Bearer jg_alice"})
        assert key.status_code == 200
        chunked = await client.post("/e/iris/up", content=_chunks(b"a", b"b"), headers=AUTH)
        assert chunked.json()["body_length"] == 2
        head = await client.head("/e/iris/ping", headers=AUTH)
        assert head.status_code == 200
        assert head.content == b""
        unknown = await client.get("/e/nope/ping", headers=AUTH)
        assert unknown.status_code == 401
        refused = await client.get("/e/iris/ping", headers={"Authorization": "Bearer jge_no"})
        assert refused.status_code == 401
        plain = await client.get("/e/iris/ping", headers=AUTH)
        assert plain.status_code == 200
    host, port = proxy.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head_10 = f"GET /e/iris/ping HTTP/1.0\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
    writer.write(head_10.encode() + b"\r\n")
    old = await asyncio.wait_for(reader.read(), 10)  # HTTP/1.0: closed after the answer
    writer.close()
    assert old.startswith(b"HTTP/1.1 200 ")
    expect_taken(proxy, fast_lane, 1)  # only the plain request
    assert endpoint.load.requests == 5  # the admitted ones, on either path
    await all_released(endpoint)


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part
