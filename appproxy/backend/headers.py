"""Header hygiene at both edges of a hop (RFC 9110 section 7.6.1).

Hop-by-hop headers, and every header a ``Connection`` header names, belong to one
connection and are dropped in both directions. Towards the app, the proxy also drops its
own credentials (its cookie, through ``cookie_filter``; a jobgate Bearer key), any
``X-Forwarded-*`` it did not vouch for, and ``Expect`` (the client has been answered
already); then it states where the request came from with
``X-Forwarded-For/-Proto/-Host/-Prefix`` and sends the public ``Host`` (code-server
compares it with the browser's ``Origin``). A :class:`Credential` is what the proxy
presents to the app: headers and a cookie that replace whatever the client sent by those
names, so a user can never choose what the app is shown.

    >>> response_headers([(b"Connection", b"close, X-Trace"), (b"X-Trace", b"1"),
    ...                   (b"Content-Type", b"text/plain")])
    [(b'content-type', b'text/plain')]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["HOP_BY_HOP", "Credential", "Forwarding", "request_headers", "response_headers"]

HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Replaced by the proxy's own values, or meaningless past the proxy.
_REQUEST_DROP: Final = HOP_BY_HOP | {
    b"host",
    b"expect",
    b"forwarded",
    b"x-forwarded-for",
    b"x-forwarded-proto",
    b"x-forwarded-host",
    b"x-forwarded-prefix",
    b"x-forwarded-port",
    b"x-real-ip",
}


@dataclass(frozen=True, slots=True)
class Forwarding:
    """What the app is told about the original request."""

    host: str  # the public host, as the browser sent it
    proto: str  # "http" or "https"
    client_chain: str  # X-Forwarded-For value
    prefix: str  # "/s/{session}/{app}", "" in subdomain mode


@dataclass(frozen=True, slots=True)
class Credential:
    """Headers (lower-case names) and one cookie the app gets from the proxy alone."""

    headers: tuple[tuple[bytes, bytes], ...] = ()
    cookie: tuple[bytes, bytes] | None = None  # (name, value)

    @property
    def names(self) -> frozenset[bytes]:
        return frozenset(n for n, _ in self.headers)

    def present(self, out: list[tuple[bytes, bytes]]) -> None:
        """Add the headers, and the cookie to the one ``Cookie`` header (RFC 6265 5.4)."""
        out.extend(self.headers)
        if self.cookie is None:
            return
        pair = self.cookie[0] + b"=" + self.cookie[1]
        for i, (name, value) in enumerate(out):
            if name == b"cookie":
                out[i] = (name, value + b"; " + pair)
                return
        out.append((b"cookie", pair))


def _cookie(
    value: bytes,
    cookie_filter: Callable[[bytes], bytes | None] | None,
    credential: Credential | None,
) -> bytes | None:
    """One ``Cookie`` header as the app gets it (None: drop it)."""
    kept: bytes | None = value if cookie_filter is None else cookie_filter(value)
    if kept is None or credential is None or credential.cookie is None:
        return kept
    name = credential.cookie[0]
    pairs = [p.strip() for p in kept.split(b";") if p.strip()]
    return b"; ".join(p for p in pairs if p.partition(b"=")[0].strip() != name) or None


def _tokens(value: bytes) -> set[bytes]:
    """The header names one ``Connection`` header lists, lower case."""
    return {t.strip().lower() for t in value.split(b",") if t.strip()}


def request_headers(
    headers: Iterable[tuple[bytes, bytes]],
    forwarding: Forwarding,
    *,
    hide_authorization: bool,
    cookie_filter: Callable[[bytes], bytes | None] | None = None,
    credential: Credential | None = None,
) -> list[tuple[bytes, bytes]]:
    """The headers to send to the app (ASGI request header names are lower case).

    ``cookie_filter`` rewrites each ``Cookie`` header (None drops it): the frontend
    passes the function that removes its own cookie. A WebSocket handshake's
    ``Sec-WebSocket-*`` headers go through: the app answers the client's own handshake.
    ``credential``: the client's headers of its names, and its cookie of that name, are
    dropped and the credential's own sent instead.
    """
    out: list[tuple[bytes, bytes]] = []
    if forwarding.host:
        out.append((b"host", forwarding.host.encode("latin-1")))
    first = len(out)
    named: set[bytes] = set()
    drop = _REQUEST_DROP if credential is None else _REQUEST_DROP | credential.names
    for name, value in headers:
        if name in drop:
            if name == b"connection":
                named |= _tokens(value)
            continue
        if name == b"cookie":
            kept = _cookie(value, cookie_filter, credential)
            if kept is None:
                continue
            value = kept
        elif name == b"authorization" and hide_authorization:
            continue
        out.append((name, value))
    if named:  # rare: only the client's own headers can be named away
        out[first:] = [(n, v) for n, v in out[first:] if n not in named]
    if credential is not None:
        credential.present(out)
    out.append((b"x-forwarded-for", forwarding.client_chain.encode("latin-1")))
    out.append((b"x-forwarded-proto", forwarding.proto.encode("latin-1")))
    out.append((b"x-forwarded-host", forwarding.host.encode("latin-1")))
    if forwarding.prefix:
        out.append((b"x-forwarded-prefix", forwarding.prefix.encode("latin-1")))
    return out


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The app's response headers without hop-by-hop ones, names lower-cased for ASGI."""
    out: list[tuple[bytes, bytes]] = []
    named: set[bytes] = set()
    for name, value in raw:
        lower = name.lower()
        if lower in HOP_BY_HOP:
            if lower == b"connection":
                named |= _tokens(value)
            continue
        out.append((lower, value))
    if named:
        out = [(n, v) for n, v in out if n not in named]
    return out
