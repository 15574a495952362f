"""What one request head means for the fast lane, kept per client connection.

A keep-alive client usually sends the same head again and again (same method, URL and
headers). What depends only on the head - the target, the credentials, the head for the
replica, the admission for one route - is kept (:class:`ParsedHead`) and used again
while the next head is byte for byte the same (``FastLane`` fills it in).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from appproxy.backend.headers import Forwarding, request_headers
from appproxy.backend.http1 import request_head
from appproxy.frontend.cookies import strip_jobgate_cookies
from appproxy.frontend.incoming import Incoming
from appproxy.frontend.inference import admitted_at_once

if TYPE_CHECKING:
    from contract.endpoints import EndpointRoute

__all__ = ["ParsedHead"]


class ParsedHead:
    """What one request head means for the lane (``name`` None: not for the lane)."""

    __slots__ = (
        "_heads",
        "_hide",
        "_route",
        "_until",
        "forwarding",
        "has_body",
        "key",
        "name",
        "req",
        "retry",
        "target",
    )

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key
        self.name: str | None = None
        self.req: Incoming | None = None
        self.target = b""
        self.has_body = False
        self.retry = False
        self.forwarding: Forwarding | None = None
        self._heads: dict[bool, bytes | None] = {}
        self._route: EndpointRoute | None = None
        self._hide = False
        self._until = 0.0

    def admitted(self, route: EndpointRoute) -> bool | None:
        """Whether to hide Authorization (the caller is admitted at once), or None."""
        if route is self._route and (self._until == math.inf or time.time() < self._until):
            return self._hide
        assert self.req is not None
        admitted = admitted_at_once(route, self.req)
        if admitted is None:
            self._route = None
            return None
        self._route = route
        self._hide, self._until = admitted
        return self._hide

    def head(self, method: bytes, headers: list[tuple[bytes, bytes]], hide: bool) -> bytes | None:
        """The request head for the replica (None: a target that cannot be sent)."""
        if hide in self._heads:
            return self._heads[hide]
        assert self.forwarding is not None
        upstream_headers = request_headers(
            headers,
            self.forwarding,
            cookie_filter=strip_jobgate_cookies,
            hide_authorization=hide,
        )
        try:
            head: bytes | None = request_head(method, self.target, upstream_headers)
        except ValueError:
            head = None  # the ASGI path answers it (502, as for any unsendable target)
        self._heads[hide] = head
        return head
