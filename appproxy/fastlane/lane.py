"""Which requests take the fast lane, decided in uvicorn's ``on_headers_complete``.

    method GET/POST/PUT/DELETE/PATCH/OPTIONS, HTTP/1.1, no upgrade, no Expect,
    no pipelined request still running, body framed by Content-Length (or none)
      ─▶ /e/{name}/… (or {name}.{base_domain}) ─▶ EndpointStore.peek (memory, while live)
      ─▶ public, or a live endpoint token (admitted_at_once: no look-up to wait for)
      ─▶ request head built (backend/headers.request_headers, as the ASGI path builds it)
      ─▶ Balancer.try_admit: a free slot now, nobody queued
      ─▶ FastExchange
    any "no" ─▶ False: uvicorn carries on as usual (the ASGI path decides and answers)

Every check before the slot is taken is free of side effects, so a request that is not
taken is handled exactly as if the lane did not exist - also when one of them fails on
a bug (:meth:`FastLane.declined`: logged, counted, and the ASGI path answers).

A keep-alive client usually sends the same head again and again (same method, URL and
headers). What depends only on the head - the target, the credentials, the head for the
replica, the admission for one route - is kept per connection (:class:`ParsedHead`)
and used again while the next head is byte for byte the same; the route, the balancer
and the token's expiry are looked at for every request.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from typing import TYPE_CHECKING, Any, Final

import httptools

from appproxy.backend.headers import Forwarding
from appproxy.backend.timers import CoarseTimers
from appproxy.fastlane.exchange import FastExchange
from appproxy.fastlane.head import ParsedHead
from appproxy.fastlane.upstream import UpstreamPool
from appproxy.frontend.addressing import endpoint_target
from appproxy.frontend.incoming import Incoming, TrustedNetworks
from appproxy.frontend.inference import IDEMPOTENT_METHODS

if TYPE_CHECKING:
    from appproxy.fastlane.protocol import FastLaneProtocol
    from appproxy.inference.prober import ReadinessProber
    from appproxy.inference.store import EndpointStore

__all__ = ["FastLane"]

log = logging.getLogger(__name__)

_METHODS: Final = frozenset({b"GET", b"POST", b"PUT", b"DELETE", b"PATCH", b"OPTIONS"})
_IDEMPOTENT: Final = frozenset(m.encode() for m in IDEMPOTENT_METHODS)
_ENDPOINT_ROOT: Final = b"/e/"


class FastLane:
    """The fast lane of one proxy process (created at startup, in the server's loop)."""

    def __init__(
        self,
        *,
        store: EndpointStore,
        prober: ReadinessProber,
        trusted: TrustedNetworks,
        base_domain: str | None,
        public_host: str,
        connect_timeout: float,
        read_timeout: float | None,
        pool_size: int,
    ) -> None:
        self._store = store
        self.prober = prober
        self._trusted = trusted
        self._base_domain = base_domain
        self._public_host = public_host
        self.read_timeout = read_timeout
        self.loop = asyncio.get_running_loop()
        self.pool = UpstreamPool(connect_timeout=connect_timeout, max_idle_per_origin=pool_size)
        self.timers = CoarseTimers(resolution=0.1)
        self.taken = 0  # requests served here (tests and benchmarks look)
        self.failures = 0  # exchanges ended by a bug in the lane (FastExchange.fail)

    def close(self) -> None:
        self.timers.close()
        self.pool.close()

    def try_start(self, protocol: FastLaneProtocol) -> bool:
        """Serve the request whose head was just parsed, or say no (False) at no cost."""
        method = _plain_method(protocol)
        if method is None:
            return False
        headers = protocol.headers
        key = (method, protocol.url, *headers)
        parsed = protocol.parsed
        if parsed is None or parsed.key != key:
            parsed = protocol.parsed = self._parse(protocol, method, key)
        name = parsed.name
        if name is None:
            return False
        endpoint = self._store.peek(name)
        if endpoint is None:
            return False
        hide = parsed.admitted(endpoint.route)
        if hide is None:
            return False
        head = parsed.head(method, headers, hide)
        if head is None:
            return False
        replica = endpoint.balancer.try_admit()
        if replica is None:
            return False  # the queue, or held at zero: the ASGI path waits
        assert parsed.req is not None
        exchange = FastExchange(
            self,
            protocol,
            endpoint,
            replica,
            method=method,
            head=head,
            has_body=parsed.has_body,
            keep_alive=protocol.parser.should_keep_alive(),
            retry=parsed.retry,
            accept=parsed.req.accept,
        )
        protocol.cycle = exchange  # type: ignore[assignment]
        protocol.fast = exchange
        self.taken += 1
        exchange.start()
        return True

    def declined(self, protocol: FastLaneProtocol, exc: Exception) -> None:
        """:meth:`try_start` failed on a bug before taking a slot: logged (no message: it
        may hold request data) and counted; the request goes the ASGI path."""
        protocol.parsed = None  # nothing half-built is used again
        self.failures += 1
        log.error(
            "fast lane: a request head failed on a bug in the proxy (%s); the ASGI path "
            "answers it\n%s",
            type(exc).__name__,
            "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
        )

    def _parse(self, protocol: FastLaneProtocol, method: bytes, key: tuple[Any, ...]) -> ParsedHead:
        parsed = ParsedHead(key)
        url = httptools.parse_url(protocol.url)
        raw_path: bytes | None = url.path
        if not raw_path:
            return parsed
        on_path = raw_path.startswith(_ENDPOINT_ROOT)
        if not on_path and not self._base_domain:
            return parsed
        framing = _framing(protocol.headers)
        if framing is None:
            return parsed
        scope = {
            "headers": protocol.headers,
            "client": protocol.client,
            "scheme": protocol.scheme,
            "raw_path": raw_path,
            "query_string": url.query or b"",
        }
        req = Incoming(scope, self._trusted)
        target = endpoint_target(
            req.host,
            req.raw_path,
            base_domain=self._base_domain,
            public_host=self._public_host,
            on_path=on_path,
        )
        if target is None:
            return parsed
        parsed.req = req
        parsed.name = target.name
        parsed.has_body, keyed = framing
        parsed.retry = keyed or method in _IDEMPOTENT
        parsed.target = (target.rest + (f"?{req.query}" if req.query else "")).encode("latin-1")
        parsed.forwarding = Forwarding(req.host, req.scheme, req.forwarded_for, target.prefix)
        return parsed


def _plain_method(protocol: FastLaneProtocol) -> bytes | None:
    """The request's method if nothing about the connection or the request rules the
    lane out: no running request ahead of it (pipelining), no ``Expect``, HTTP/1.1, no
    upgrade, none of uvicorn's extras (access log, root path, concurrency limit)."""
    cycle = protocol.cycle
    if cycle is not None and not cycle.response_complete:
        return None  # pipelined behind a running request: uvicorn queues it
    if protocol.expect_100_continue or protocol.access_log or protocol.root_path:
        return None
    if protocol.limit_concurrency is not None:
        return None
    parser = protocol.parser
    if parser.should_upgrade() or parser.get_http_version() != "1.1":
        return None
    method: bytes = parser.get_method()
    return method if method in _METHODS else None


def _framing(headers: list[tuple[bytes, bytes]]) -> tuple[bool, bool] | None:
    """(has a body, has an Idempotency-Key); None for a chunked body (the ASGI path)."""
    has_body = keyed = False
    for name, value in headers:
        if name == b"content-length":
            has_body = value.strip() != b"0"
        elif name == b"transfer-encoding":
            return None
        elif name == b"idempotency-key":
            keyed = True
    return has_body, keyed
