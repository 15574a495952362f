"""A read-once view of an incoming request: who sent it, for which host, with what credentials.

``X-Forwarded-*`` headers are believed only from peers listed as trusted proxies (a TLS
terminator in front of jobgate); from anyone else they are ignored, so a client cannot
claim to be https or to come from another address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from functools import lru_cache
from typing import Final
from urllib.parse import quote

from appproxy.asgi import Scope

__all__ = ["Incoming", "TrustedNetworks"]

_BEARER: Final = b"bearer "
_KEY_PREFIX: Final = "jg_"


class TrustedNetworks:
    """A set of IP networks with a cached membership test."""

    def __init__(self, networks: Iterable[str]) -> None:
        self._networks = tuple(ipaddress.ip_network(n, strict=False) for n in networks)
        self.contains = lru_cache(maxsize=1024)(self._contains)

    def _contains(self, address: str) -> bool:
        if not self._networks or not address:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in net for net in self._networks)


class Incoming:
    """The parts of an ASGI scope the frontend decides on, read in one pass over headers."""

    __slots__ = (
        "accept",
        "bearer",
        "client",
        "cookies",
        "forwarded_chain",
        "host",
        "jobgate_key",
        "query",
        "raw_path",
        "scheme",
        "scope",
    )

    def __init__(self, scope: Scope, trusted: TrustedNetworks) -> None:
        self.scope = scope
        self.cookies: list[bytes] = []
        self.accept = ""
        self.jobgate_key: str | None = None  # "jg_..." from Authorization: Bearer
        self.bearer: str | None = None  # any Bearer credential (an endpoint token, say)
        host = b""
        fwd_for = fwd_proto = fwd_host = b""
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
            elif name == b"cookie":
                self.cookies.append(value)
            elif name == b"accept":
                self.accept = value.decode("latin-1")
            elif name == b"authorization":
                self.bearer = _bearer(value)
                if self.bearer is not None and self.bearer.startswith(_KEY_PREFIX):
                    self.jobgate_key = self.bearer
            elif name == b"x-forwarded-for":
                fwd_for = value
            elif name == b"x-forwarded-proto":
                fwd_proto = value
            elif name == b"x-forwarded-host":
                fwd_host = value
        peer = scope.get("client")
        self.client: str = peer[0] if peer else ""
        secure = scope.get("scheme") in ("https", "wss")
        self.scheme = "https" if secure else "http"
        self.forwarded_chain: str | None = None
        if (fwd_for or fwd_proto or fwd_host) and trusted.contains(self.client):
            if fwd_proto:
                self.scheme = "https" if fwd_proto.strip().lower() == b"https" else "http"
            host = fwd_host or host
            self.forwarded_chain = fwd_for.decode("latin-1") or None
        self.host = host.decode("latin-1")
        raw = scope.get("raw_path")
        self.raw_path: str = raw.decode("latin-1") if raw else quote(scope["path"])
        self.query: str = scope.get("query_string", b"").decode("latin-1")

    @property
    def websocket(self) -> bool:
        return bool(self.scope["type"] == "websocket")

    @property
    def forwarded_for(self) -> str:
        """``X-Forwarded-For`` for the app: the trusted chain, then the peer."""
        if self.forwarded_chain:
            return f"{self.forwarded_chain}, {self.client}"
        return self.client


def _bearer(value: bytes) -> str | None:
    """The credential of an ``Authorization: Bearer`` header, or None for anything else."""
    if len(value) > 7 and value[:7].lower() == _BEARER:
        return value[7:].strip().decode("latin-1") or None
    return None
