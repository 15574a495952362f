"""The fast lane inside uvicorn's protocol, with stand-in transports (no sockets).

What the integration tests cannot steer: a request pipelined behind a fast exchange,
the keep-alive timeout after a fast answer, a graceful shutdown in the middle of one,
a client that leaves before the replica answers, framing at both ends, back-pressure,
and a bug in the lane (injected) contained to the one exchange.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from appproxy.asgi import Receive, Scope, Send
from appproxy.backend.http1 import Http1Connection
from appproxy.fastlane.exchange import FastExchange
from appproxy.fastlane.lane import FastLane
from appproxy.fastlane.protocol import FastLaneProtocol
from appproxy.fastlane.upstream import UpstreamPool
from appproxy.frontend.incoming import TrustedNetworks
from appproxy.inference.balancer import Replica
from appproxy.inference.store import Endpoint, EndpointStore
from appproxy.metrics import EndpointCounters
from contract.endpoints import EndpointRoute, Probe, ReplicaTarget, TokenGrant, token_digest

TOKEN = "jge_unit-token-0123456789"
FAST = b"GET /e/unit/ping HTTP/1.1\r\nhost: proxy\r\nauthorization: Bearer " + TOKEN.encode()
FAST += b"\r\n\r\n"
SLOW = b"GET /other HTTP/1.1\r\nhost: proxy\r\n\r\n"  # not an endpoint: the ASGI path
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


class Transport:
    """Records writes; closing is a flag."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closing = False
        self.reading = True

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def take(self) -> bytes:
        data, self.written = b"".join(self.written), []
        return data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8421), "peername": ("127.0.0.1", 50000)}.get(name)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_write_buffer_size(self) -> int:
        return 0


class App:
    """The ASGI side: answers "asgi" to whatever reaches it."""

    fast_lane: FastLane | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"asgi"})


class Rig:
    def __init__(self, lane: FastLane, endpoint: Endpoint, **config: Any) -> None:
        self.lane, self.endpoint = lane, endpoint
        app = App()
        app.fast_lane = lane
        options: dict[str, Any] = {"lifespan": "off", "proxy_headers": False, "access_log": False}
        cfg = uvicorn.Config(app, http=FastLaneProtocol, **options, **config)
        cfg.load()
        self.state = ServerState()
        self.protocol = FastLaneProtocol(cfg, self.state, {}, _loop=asyncio.get_running_loop())
        self.client = Transport()
        self.protocol.connection_made(self.client)  # type: ignore[arg-type]
        self.state.connections.add(self.protocol)
        self.upstreams: list[tuple[Http1Connection, Transport]] = []
        for replica in endpoint.balancer.replicas.values():
            conn, transport = Http1Connection(), Transport()
            conn.connection_made(transport)  # type: ignore[arg-type]
            lane.pool.put_back(replica.upstream or "", conn)
            self.upstreams.append((conn, transport))

    def asked(self) -> tuple[Http1Connection, bytes]:
        """The upstream connection that was sent a request, and the request."""
        for conn, transport in self.upstreams:
            if transport.written:
                return conn, transport.take()
        raise AssertionError("no replica was asked")

    @property
    def replica(self) -> Replica:
        (replica,) = self.endpoint.balancer.replicas.values()
        return replica


async def rig(read_timeout: float = 300.0, **config: Any) -> Rig:
    store = EndpointStore(None, EndpointCounters(lambda session_id: None))  # type: ignore[arg-type]
    target = ReplicaTarget(
        session_id="r0", index=0, revision=1, upstream="http://127.0.0.1:9", state="serving"
    )
    grant = TokenGrant(id="t", digest=token_digest(TOKEN))
    route = EndpointRoute(
        endpoint_id="ep-unit",
        name="unit",
        owner_id="u",
        replicas=(target,),
        tokens=(grant,),
        probe=Probe(path="/ping"),
    )
    store._apply("unit", route)
    store.live.set()
    endpoint = store.peek("unit")
    assert endpoint is not None
    for replica in endpoint.balancer.replicas.values():
        replica.ready = True
    endpoint.balancer.refresh()

    class Prober:
        def connect_failed(self, *args: object) -> None:
            pass

    lane = FastLane(
        store=store,
        prober=Prober(),  # type: ignore[arg-type]
        trusted=TrustedNetworks([]),
        base_domain=None,
        public_host="",
        connect_timeout=1.0,
        read_timeout=read_timeout,
        pool_size=8,
    )
    return Rig(lane, endpoint, **config)


async def test_a_pipelined_request_waits_for_the_fast_answer_before_it() -> None:
    r = await rig()
    r.protocol.data_received(FAST + SLOW)  # both heads in one read
    assert r.lane.taken == 1
    assert r.client.take() == b""  # the second one waits in uvicorn's queue
    conn, _ = r.asked()
    conn.data_received(ANSWER)
    for _ in range(10):
        await asyncio.sleep(0)
    out = r.client.take()
    first, second = out.split(b"\r\n\r\nok", 1)  # the fast answer first, whole
    assert first == b"HTTP/1.1 200 OK\r\ncontent-length: 2"
    assert second.endswith(b"4\r\nasgi\r\n0\r\n\r\n")  # then the ASGI path's
    assert r.state.total_requests == 2


async def test_keep_alive_timeout_closes_an_idle_connection_after_a_fast_answer() -> None:
    r = await rig(timeout_keep_alive=0.2)
    r.protocol.data_received(FAST)
    conn, request = r.asked()
    assert request.startswith(b"GET /ping HTTP/1.1\r\nhost: proxy\r\n")
    conn.data_received(ANSWER)
    assert r.client.take().endswith(b"ok")
    assert not r.client.is_closing()
    for _ in range(100):  # bounded: the coarse timers tick every 0.1 s
        if r.client.is_closing():
            break
        await asyncio.sleep(0.05)
    assert r.client.is_closing()


async def test_shutdown_in_the_middle_lets_the_answer_finish_then_closes() -> None:
    r = await rig()
    r.protocol.data_received(FAST)
    conn, _ = r.asked()
    r.protocol.shutdown()  # uvicorn's graceful shutdown: the exchange is still running
    assert not r.client.is_closing()
    conn.data_received(ANSWER)
    out = r.client.take()
    assert b"connection: close\r\n" in out
    assert out.endswith(b"ok")
    assert r.client.is_closing()
    assert r.replica.in_flight == 0


async def test_a_client_leaving_before_the_answer_frees_the_slot_and_the_connection() -> None:
    r = await rig()
    r.protocol.data_received(FAST)
    conn, _ = r.asked()
    assert r.replica.in_flight == 1
    r.protocol.connection_lost(None)
    assert r.replica.in_flight == 0
    assert r.replica.stats.in_flight == 0
    assert conn.closed  # the replica's connection is not reused for someone else
    assert r.lane.pool.take(r.replica.upstream or "") is None


async def test_a_replica_silent_before_its_head_is_the_504_page() -> None:
    r = await rig(read_timeout=0.2)
    r.protocol.data_received(FAST)
    conn, _ = r.asked()
    for _ in range(100):  # bounded: the coarse timers tick every 0.1 s
        if r.client.written:
            break
        await asyncio.sleep(0.05)
    out = r.client.take()
    assert out.startswith(b"HTTP/1.1 504 ")
    assert b"urn:jobgate:proxy:app-timed-out" in out  # JSON: an API client (no Accept)
    assert conn.closed
    assert r.replica.stats.failures == 1
    assert r.replica.in_flight == 0
    assert not r.client.is_closing()  # the client's connection stays open for the next one


# ---- framing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
        b"Content-Length: 3\r\nContent-Length: 3\r\n",
        b"Content-Length: 3, 3\r\n",
        b"X-Folded: a\r\n b\r\n",  # obs-fold
        b"X-Nul: a\x00b\r\n",
        b"X-Cr: a\rb\r\n",
    ],
    ids=["cl-and-te", "two-cl", "cl-list", "obs-fold", "nul", "bare-cr"],
)
async def test_an_ambiguous_or_invalid_head_is_refused_before_the_lane(head: bytes) -> None:
    r = await rig()
    start = b"POST /e/unit/ping HTTP/1.1\r\nhost: proxy\r\nauthorization: Bearer "
    r.protocol.data_received(start + TOKEN.encode() + b"\r\n" + head + b"\r\nabc")
    assert r.client.take().startswith(b"HTTP/1.1 400 ")
    assert r.client.is_closing()
    assert r.lane.taken == 0
    assert all(not transport.written for _, transport in r.upstreams)  # nothing reached a replica


async def test_absolute_form_is_routed_by_its_path_and_asterisk_form_is_not_the_lanes() -> None:
    r = await rig()
    r.protocol.data_received(FAST.replace(b"GET /e/", b"GET http://elsewhere.example/e/"))
    _, request = r.asked()  # as on the ASGI path: the path, and the Host header as sent
    assert request.startswith(b"GET /ping HTTP/1.1\r\nhost: proxy\r\n")
    other = await rig()
    other.protocol.data_received(b"OPTIONS * HTTP/1.1\r\nhost: proxy\r\n\r\n")
    for _ in range(10):
        await asyncio.sleep(0)
    assert other.client.take().endswith(b"4\r\nasgi\r\n0\r\n\r\n")
    assert other.lane.taken == 0


async def test_bytes_after_the_announced_body_are_the_next_request() -> None:
    r = await rig()
    post = FAST.replace(b"GET ", b"POST ").replace(b"\r\n\r\n", b"\r\ncontent-length: 3\r\n\r\n")
    r.protocol.data_received(post + b"abc" + SLOW)
    conn, request = r.asked()
    assert request.endswith(b"\r\n\r\nabc")  # exactly the announced body, nothing more
    conn.data_received(ANSWER)
    for _ in range(10):
        await asyncio.sleep(0)
    assert r.client.take().endswith(
        b"ok" + b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nasgi\r\n0\r\n\r\n"
    )
    assert r.lane.pool.take(r.replica.upstream or "") is conn  # a clean exchange: reused


async def test_an_answer_before_the_whole_body_does_not_reuse_the_replica_connection() -> None:
    r = await rig()
    post = FAST.replace(b"GET ", b"POST ").replace(b"\r\n\r\n", b"\r\ncontent-length: 10\r\n\r\n")
    r.protocol.data_received(post + b"abc")
    conn, _ = r.asked()
    conn.data_received(ANSWER)  # the replica answers early
    assert r.client.take().endswith(b"ok")
    assert conn.closed  # the rest of the body would be read as the next request
    r.protocol.data_received(b"defghij")  # the rest of the body: nobody's now
    assert r.replica.in_flight == 0
    assert not r.client.is_closing()


async def test_bytes_after_the_replicas_answer_make_its_connection_unusable() -> None:
    r = await rig()
    r.protocol.data_received(FAST)
    conn, _ = r.asked()
    conn.data_received(ANSWER + b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\nsmuggled")
    assert r.client.take().endswith(b"\r\n\r\nok")
    assert conn.closed
    assert r.lane.pool.take(r.replica.upstream or "") is None  # no one else reads the rest


async def test_a_status_http_does_not_know_is_an_invalid_answer() -> None:
    r = await rig()
    r.protocol.data_received(FAST)
    conn, _ = r.asked()
    conn.data_received(b"HTTP/1.1 999 Odd\r\ncontent-length: 0\r\n\r\n")
    out = r.client.take()
    assert out.startswith(b"HTTP/1.1 502 ")
    assert b"app-not-answering" in out
    assert r.lane.failures == 0  # the replica's fault, not a bug in the lane
    assert r.replica.stats.failures == 1
    assert r.replica.in_flight == 0


# ---- a bug in the lane -----------------------------------------------------------------------


class Bug(Exception):
    pass


def _raise(*args: object) -> Any:
    raise Bug("secret-" + TOKEN)


async def test_a_bug_before_the_answer_is_the_502_page_and_frees_the_slot(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    r = await rig()
    monkeypatch.setattr("appproxy.fastlane.exchange.response_headers", _raise)
    r.protocol.data_received(FAST)
    conn, _ = r.asked()
    with caplog.at_level(logging.ERROR):
        conn.data_received(ANSWER)
    out = r.client.take()
    assert out.startswith(b"HTTP/1.1 502 ")
    assert b"proxy-failed" in out
    assert b"connection: close\r\n" in out
    assert r.client.is_closing()
    assert conn.closed
    assert (r.replica.in_flight, r.replica.stats.in_flight, r.replica.stats.failures) == (0, 0, 1)
    assert r.lane.failures == 1
    (record,) = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert "Bug" in record.getMessage()
    assert TOKEN not in caplog.text


async def test_a_bug_in_the_middle_of_the_answer_cuts_the_client_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r = await rig()
    r.protocol.data_received(FAST)
    conn, _ = r.asked()
    conn.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nok")
    assert r.client.take().endswith(b"\r\n\r\nok")
    monkeypatch.setattr(FastExchange, "upstream_body", _raise)
    conn.data_received(b"ok")
    assert r.client.take() == b""  # nothing after the cut body
    assert r.client.is_closing()
    assert conn.closed
    assert r.replica.in_flight == 0
    assert r.lane.failures == 1


async def test_a_bug_on_the_clients_side_frees_the_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    r = await rig()
    monkeypatch.setattr(FastExchange, "client_body", _raise)
    post = FAST.replace(b"GET ", b"POST ").replace(b"\r\n\r\n", b"\r\ncontent-length: 3\r\n\r\n")
    r.protocol.data_received(post + b"abc")
    conn, _ = r.asked()
    out = r.client.take()
    assert out.startswith(b"HTTP/1.1 502 ")  # not uvicorn's 400 for an invalid request
    assert b"proxy-failed" in out
    assert r.client.is_closing()
    assert conn.closed
    assert r.replica.in_flight == 0
    assert r.lane.failures == 1


async def test_a_bug_before_the_slot_leaves_the_request_to_the_asgi_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r = await rig()
    monkeypatch.setattr("appproxy.fastlane.head.admitted_at_once", _raise)
    r.protocol.data_received(FAST)
    for _ in range(10):
        await asyncio.sleep(0)
    assert r.client.take().endswith(b"4\r\nasgi\r\n0\r\n\r\n")
    assert (r.lane.taken, r.lane.failures) == (0, 1)
    assert r.replica.in_flight == 0


# ---- back-pressure, the pool -----------------------------------------------------------------


async def test_a_client_still_behind_on_the_last_answer_pauses_the_next_one_at_once() -> None:
    r = await rig()
    r.protocol.pause_writing()  # its send buffer is still full from an earlier answer
    r.protocol.data_received(FAST)
    conn, _ = r.asked()
    upstream = next(t for c, t in r.upstreams if c is conn)
    assert not upstream.reading  # the replica's answer waits in the replica, not here
    r.protocol.resume_writing()
    assert upstream.reading


async def test_a_replica_slow_to_read_the_held_body_keeps_the_client_paused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r = await rig()
    for conn, _ in r.upstreams:
        conn.close()  # no pooled connection: the body is held while connecting
    connected = asyncio.Event()
    conn = Http1Connection()

    class Full(Transport):
        def write(self, data: bytes) -> None:
            super().write(data)
            conn.pause_writing()  # as asyncio does when its buffer passes the high-water mark

    async def open_slowly(origin: str) -> Http1Connection:
        await connected.wait()
        conn.connection_made(Full())  # type: ignore[arg-type]
        return conn

    monkeypatch.setattr(r.lane.pool, "open", open_slowly)
    size = 3 * 1024 * 1024
    post = FAST.replace(b"GET ", b"POST ").replace(
        b"\r\n\r\n", f"\r\ncontent-length: {size}\r\n\r\n".encode()
    )
    r.protocol.data_received(post + b"x" * (2 * 1024 * 1024))
    assert not r.client.reading  # held above the limit: paused
    connected.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert conn.transport is not None
    assert not r.client.reading  # the replica cannot take more yet


async def test_idle_replica_connections_are_closed_after_the_idle_timeout() -> None:
    pool = UpstreamPool(connect_timeout=1.0, idle_timeout=0.05)
    conn, transport = Http1Connection(), Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    pool.put_back("http://127.0.0.1:9", conn)  # its replica may never be asked again
    for _ in range(100):  # bounded
        if transport.closing:
            break
        await asyncio.sleep(0.02)
    assert transport.closing
    pool.close()
