"""The few ASGI types the proxy uses (kept here so no framework is needed for them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeAlias

__all__ = ["ASGIApp", "Message", "Receive", "Scope", "Send", "header"]

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of a request header (names in ASGI scopes are lower case)."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None
