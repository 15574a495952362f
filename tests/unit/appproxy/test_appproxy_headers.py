"""Header hygiene: hop-by-hop headers stop at the proxy, credentials never reach apps."""

from __future__ import annotations

import pytest

from appproxy.backend.headers import Forwarding, request_headers, response_headers
from appproxy.frontend.cookies import strip_cookie

FORWARDING = Forwarding(
    host="apps.example.org", proto="https", client_chain="203.0.113.7", prefix="/s/abc/jupyter"
)


def names(headers: list[tuple[bytes, bytes]]) -> list[str]:
    return [name.decode().lower() for name, _ in headers]


def as_dict(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    return {name.decode().lower(): value.decode() for name, value in headers}


@pytest.mark.parametrize(
    ("name", "incoming", "gone"),
    [
        (
            "hop-by-hop",
            [
                (b"connection", b"keep-alive"),
                (b"keep-alive", b"timeout=5"),
                (b"te", b"trailers"),
                (b"transfer-encoding", b"chunked"),
                (b"upgrade", b"h2c"),
                (b"proxy-authorization", b"Basic x"),
                (b"trailer", b"x"),
            ],
            {
                "connection",
                "keep-alive",
                "te",
                "transfer-encoding",
                "upgrade",
                "proxy-authorization",
                "trailer",
            },
        ),
        (
            "named in Connection",
            [(b"connection", b"close, x-private"), (b"x-private", b"1")],
            {"connection", "x-private"},
        ),
        (
            "client's forwarding claims",
            [
                (b"x-forwarded-for", b"6.6.6.6"),
                (b"x-forwarded-host", b"evil"),
                (b"forwarded", b"for=x"),
                (b"x-real-ip", b"6.6.6.6"),
            ],
            {"forwarded", "x-real-ip"},
        ),
        ("expect", [(b"expect", b"100-continue")], {"expect"}),
    ],
)
def test_request_headers_dropped(
    name: str, incoming: list[tuple[bytes, bytes]], gone: set[str]
) -> None:
    out = request_headers(incoming, FORWARDING, hide_authorization=False)
    assert not gone & set(names(out)), name


def test_request_headers_forwarding_set_once() -> None:
    incoming = [
        (b"host", b"internal:8080"),
        (b"x-forwarded-for", b"6.6.6.6"),
        (b"accept", b"*/*"),
        (b"x-custom", b"kept"),
    ]
    out = request_headers(incoming, FORWARDING, hide_authorization=False)
    assert names(out).count("host") == 1
    assert names(out).count("x-forwarded-for") == 1
    assert as_dict(out) == {
        "host": "apps.example.org",
        "accept": "*/*",
        "x-custom": "kept",
        "x-forwarded-for": "203.0.113.7",
        "x-forwarded-proto": "https",
        "x-forwarded-host": "apps.example.org",
        "x-forwarded-prefix": "/s/abc/jupyter",
    }


def test_no_prefix_header_in_subdomain_mode() -> None:
    forwarding = Forwarding("x--app.apps.example.org", "http", "10.0.0.1", "")
    out = request_headers([], forwarding, hide_authorization=False)
    assert "x-forwarded-prefix" not in names(out)


@pytest.mark.parametrize(
    ("name", "hide", "cookie", "expected_cookie", "expected_auth"),
    [
        ("bearer key hidden, app cookie kept", True, b"jobgate_auth=t; a=1", "a=1", None),
        ("only our cookie: header dropped", False, b"jobgate_auth=t", None, "token app-own"),
    ],
)
def test_credentials_never_forwarded(
    name: str, hide: bool, cookie: bytes, expected_cookie: str | None, expected_auth: str | None
) -> None:
    incoming = [(b"cookie", cookie), (b"authorization", b"token app-own")]
    out = as_dict(
        request_headers(incoming, FORWARDING, hide_authorization=hide, cookie_filter=strip_cookie)
    )
    assert out.get("cookie") == expected_cookie, name
    assert out.get("authorization") == expected_auth, name


def test_websocket_handshake_goes_to_the_app_but_not_the_upgrade() -> None:
    """The app answers the client's own handshake; the forwarder adds its own Upgrade."""
    incoming = [
        (b"sec-websocket-key", b"k"),
        (b"sec-websocket-version", b"13"),
        (b"sec-websocket-extensions", b"permessage-deflate"),
        (b"sec-websocket-protocol", b"jupyter.v1"),
        (b"origin", b"https://x"),
        (b"upgrade", b"websocket"),
        (b"connection", b"Upgrade"),
    ]
    out = as_dict(request_headers(incoming, FORWARDING, hide_authorization=False))
    assert out["sec-websocket-key"] == "k"
    assert out["sec-websocket-protocol"] == "jupyter.v1"
    assert out["sec-websocket-extensions"] == "permessage-deflate"
    assert "upgrade" not in out
    assert "connection" not in out
    assert out["origin"] == "https://x"


def test_response_headers() -> None:
    raw = [
        (b"Content-Type", b"text/html"),
        (b"Connection", b"keep-alive, X-Trace"),
        (b"Keep-Alive", b"timeout=5"),
        (b"X-Trace", b"1"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Set-Cookie", b"a=1"),
        (b"Set-Cookie", b"b=2"),
        (b"Content-Encoding", b"gzip"),
    ]
    assert response_headers(raw) == [
        (b"content-type", b"text/html"),
        (b"set-cookie", b"a=1"),
        (b"set-cookie", b"b=2"),
        (b"content-encoding", b"gzip"),
    ]
