"""The proxy's auth cookie: reading it, hiding it from apps, and setting it.

Parsing is deliberately simple and forgiving (``name=value`` pairs split on ``;``), so
one odd cookie set by an app never hides ours, and ours is removed from the ``Cookie``
header before a request goes on, leaving the app's own cookies untouched.

    >>> cookie_values([b"a=1; jobgate_auth=xyz; b=2"])
    ['xyz']
    >>> strip_cookie(b"a=1; jobgate_auth=xyz; b=2")
    b'a=1; b=2'
    >>> strip_cookie(b"jobgate_auth=xyz") is None
    True
    >>> strip_jobgate_cookies(b"a=1; jobgate_auth=xyz; jobgate_console=c")
    b'a=1'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from contract.tokens import CONSOLE_COOKIE

__all__ = [
    "COOKIE_NAME",
    "cookie_values",
    "set_cookie_header",
    "strip_cookie",
    "strip_jobgate_cookies",
]

COOKIE_NAME: Final = "jobgate_auth"
_NAME_BYTES: Final = COOKIE_NAME.encode()


def cookie_values(headers: Iterable[bytes], name: str = COOKIE_NAME) -> list[str]:
    """Every value of cookie ``name`` in the ``Cookie`` header(s), in order."""
    wanted = name.encode()
    values: list[str] = []
    for header in headers:
        for pair in header.split(b";"):
            key, sep, value = pair.strip().partition(b"=")
            if sep and key == wanted:
                values.append(value.strip().strip(b'"').decode("latin-1"))
    return values


def strip_cookie(header: bytes, name: bytes = _NAME_BYTES) -> bytes | None:
    """The ``Cookie`` header without cookie ``name``; None when nothing is left."""
    if name not in header:
        return header
    kept = [
        pair.strip()
        for pair in header.split(b";")
        if pair.strip() and pair.strip().partition(b"=")[0] != name
    ]
    return b"; ".join(kept) or None


def strip_jobgate_cookies(header: bytes) -> bytes | None:
    """Without ours and without the gateway console's sign-in (same host in ``jobgate up``:
    an app must never see a cookie that acts as its visitor on the gateway)."""
    kept = strip_cookie(header)
    return None if kept is None else strip_cookie(kept, CONSOLE_COOKIE.encode())


def set_cookie_header(value: str, *, path: str, max_age: int, secure: bool) -> bytes:
    """``Set-Cookie`` for the auth cookie: HttpOnly, SameSite=Lax, scoped to ``path``."""
    parts = [
        f"{COOKIE_NAME}={value}",
        f"Path={path}",
        f"Max-Age={max_age}",
        "HttpOnly",
        "SameSite=Lax",
    ]
    if secure:
        parts.append("Secure")
    return "; ".join(parts).encode("latin-1")
