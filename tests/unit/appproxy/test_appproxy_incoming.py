"""Reading a request once: trusted forwarding, jobgate keys, link tokens in queries."""

from __future__ import annotations

from typing import Any

import pytest

from appproxy.frontend.auth import take_token
from appproxy.frontend.incoming import Incoming, TrustedNetworks


def scope(
    headers: list[tuple[bytes, bytes]], client: str = "10.1.2.3", scheme: str = "http"
) -> dict[str, Any]:
    return {
        "type": "http",
        "scheme": scheme,
        "client": (client, 5555),
        "path": "/s/x/y/ z",
        "raw_path": b"/s/x/y/%20z",
        "query_string": b"a=1",
        "headers": headers,
    }


FORWARDED = [
    (b"host", b"internal:8080"),
    (b"x-forwarded-for", b"203.0.113.7"),
    (b"x-forwarded-proto", b"https"),
    (b"x-forwarded-host", b"apps.example.org"),
]


@pytest.mark.parametrize(
    ("name", "trusted", "client", "host", "proto", "chain"),
    [
        (
            "trusted terminator",
            ["10.0.0.0/8"],
            "10.1.2.3",
            "apps.example.org",
            "https",
            "203.0.113.7, 10.1.2.3",
        ),
        ("untrusted peer", ["10.0.0.0/8"], "192.0.2.1", "internal:8080", "http", "192.0.2.1"),
        ("nobody trusted", [], "10.1.2.3", "internal:8080", "http", "10.1.2.3"),
    ],
)
def test_forwarded_headers_believed_only_from_trusted_peers(
    name: str, trusted: list[str], client: str, host: str, proto: str, chain: str
) -> None:
    req = Incoming(scope(FORWARDED, client=client), TrustedNetworks(trusted))
    assert (req.host, req.scheme, req.forwarded_for) == (host, proto, chain), name


def test_https_scope_is_https() -> None:
    req = Incoming(scope([(b"host", b"h")], scheme="https"), TrustedNetworks([]))
    assert req.scheme == "https"


def test_raw_path_and_query_kept_encoded() -> None:
    req = Incoming(scope([]), TrustedNetworks([]))
    assert (req.raw_path, req.query) == ("/s/x/y/%20z", "a=1")


@pytest.mark.parametrize(
    ("name", "authorization", "key"),
    [
        ("jobgate key", b"Bearer jg_abc", "jg_abc"),
        ("scheme is case-insensitive", b"bearer jg_abc", "jg_abc"),
        ("someone else's bearer", b"Bearer sk-xyz", None),
        ("jupyter token", b"token jg_abc", None),
        ("basic", b"Basic dXNlcjpwYXNz", None),
        ("empty bearer", b"Bearer ", None),
    ],
)
def test_jobgate_key(name: str, authorization: bytes, key: str | None) -> None:
    req = Incoming(scope([(b"authorization", authorization)]), TrustedNetworks([]))
    assert req.jobgate_key == key, name


@pytest.mark.parametrize(
    ("name", "query", "token", "rest"),
    [
        ("alone", "jobgate_token=abc", "abc", ""),
        ("first", "jobgate_token=abc&tab=1", "abc", "tab=1"),
        ("last, others kept encoded", "path=a%2Fb&jobgate_token=abc", "abc", "path=a%2Fb"),
        ("absent", "tab=1", None, "tab=1"),
        ("similar name", "xjobgate_token=abc", None, "xjobgate_token=abc"),
        ("empty query", "", None, ""),
    ],
)
def test_take_token(name: str, query: str, token: str | None, rest: str) -> None:
    assert take_token(query) == (token, rest), name


def test_trusted_networks_ignore_garbage() -> None:
    networks = TrustedNetworks(["127.0.0.1", "::1"])
    assert networks.contains("127.0.0.1")
    assert networks.contains("::1")
    assert not networks.contains("127.0.0.2")
    assert not networks.contains("not-an-ip")
    assert not networks.contains("")
