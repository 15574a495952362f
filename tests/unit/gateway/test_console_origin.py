"""The console's Origin rule for cookie-authenticated writes (the CSRF token is checked too)."""

from __future__ import annotations

import pytest

from gateway.console.cookies import same_origin


@pytest.mark.parametrize(
    ("name", "origin", "host", "allowed"),
    [
        ("no Origin header (the token still decides)", None, "127.0.0.1:8420", True),
        ("the console itself", "http://127.0.0.1:8420", "127.0.0.1:8420", True),
        ("behind https", "https://jobs.example.org", "jobs.example.org", True),
        ("another site", "http://evil.example", "127.0.0.1:8420", False),
        ("the app proxy's port on the same host", "http://127.0.0.1:8421", "127.0.0.1:8420", False),
        ("an opaque origin (sandboxed frame)", "null", "127.0.0.1:8420", False),
        ("no Host to compare with", "http://127.0.0.1:8420", None, False),
    ],
)
def test_same_origin(name: str, origin: str | None, host: str | None, allowed: bool) -> None:
    assert same_origin(origin, host) is allowed, name
