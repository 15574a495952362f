"""What the frontend hands to a forwarder: where to go, what to send, whom to tell.

This is the seam between *how traffic arrives* and *how it is forwarded*: the session
frontend builds an :class:`Upstream` from a route; an inference frontend will build one
from the replica it picked. Forwarders know nothing about sessions, users or cookies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Meter", "Upstream"]


class Meter(Protocol):
    """Callbacks a forwarder makes so counters, latency and idle timers stay true."""

    def responded(self, seconds: float, status: int) -> None:
        """The app's response headers arrived ``seconds`` after the request was sent."""

    def traffic(self) -> None:
        """Bytes or messages moved (keeps the session from looking idle)."""

    def failed(self) -> None:
        """The app could not be reached, or broke off mid-answer."""


@dataclass(frozen=True, slots=True)
class Upstream:
    origin: str  # "http://host:port", as in the route
    target: str  # path and query, percent-encoded exactly as they go out
    headers: list[tuple[bytes, bytes]]  # complete: Host and X-Forwarded-* included
    meter: Meter

    @property
    def url(self) -> str:
        return self.origin + self.target
