"""Outbound webhooks, the pure parts: event types, the retry schedule, Retry-After,
and which addresses a delivery may go to (no SSRF).

The schedule is Standard Webhooks' (as Svix delivers): at once, then after 5 s, 5 min,
30 min, 2 h, 5 h, 10 h and 10 h; each wait is stretched by ±20 % jitter so a receiver
that comes back is not hit by every retry at once, and scaled by a setting (tests use a
small scale). A ``Retry-After`` longer than the scheduled wait is honoured (up to a day).
After the last attempt the delivery has failed.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Sequence
from datetime import datetime
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

__all__ = [
    "EVENT_TYPES",
    "RETRY_SCHEDULE_S",
    "SCHEDULE_FROM",
    "URL_PATTERN",
    "Address",
    "Network",
    "address_refusal",
    "check_url",
    "host_refusal",
    "next_delay",
    "parse_networks",
    "retry_after_s",
    "session_event_type",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: the events a webhook can subscribe to
EVENT_TYPES = (
    "session.succeeded",
    "session.failed",
    "session.error",
    "session.cancelled",
    "session.terminated",
    "endpoint.degraded",
    "budget.warning",
    "budget.exhausted",
)
#: the waits before attempts 2..8 (attempt 1 goes at once)
RETRY_SCHEDULE_S = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
MAX_RETRY_AFTER_S = 86400.0
#: the key in a delivery's JSON ``log`` holding its attempt count when it was last
#: redelivered by hand: the retry schedule counts from there, ``attempts`` from the start
SCHEDULE_FROM = "schedule_from"
#: cloud metadata services, refused whatever else is allowed
METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)


def session_event_type(status: str) -> str:
    """``SUCCEEDED`` -> ``session.succeeded``."""
    return f"session.{status.lower()}"


def next_delay(
    attempts: int, retry_after: float | None, scale: float, rng: random.Random | None = None
) -> float | None:
    """Seconds until the next attempt after *attempts* failed ones; None: give up."""
    if attempts > len(RETRY_SCHEDULE_S):
        return None
    base = RETRY_SCHEDULE_S[attempts - 1] * scale
    delay = base * (rng or random).uniform(0.8, 1.2)
    if retry_after is not None:
        delay = max(delay, min(retry_after, MAX_RETRY_AFTER_S))
    return delay


def retry_after_s(value: str | None, now: datetime) -> float | None:
    """A ``Retry-After`` header (seconds, or an HTTP date) as seconds from *now*."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())


def parse_networks(items: Sequence[str]) -> list[Network]:
    return [ipaddress.ip_network(item.strip(), strict=False) for item in items if item.strip()]


def address_refusal(address: Address, allowed: Sequence[Network]) -> str | None:
    """Why a delivery may not go to *address*, or None when it may."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA:
        return f"{address} is a cloud metadata address"
    if any(address in net for net in allowed):
        return None
    for what, flag in (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("private", address.is_private),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
    ):
        if flag:
            return f"{address} is a {what} address (JOBGATE_WEBHOOK_ALLOW_CIDRS allows some)"
    if not address.is_global:
        return f"{address} is not a public address (JOBGATE_WEBHOOK_ALLOW_CIDRS allows some)"
    return None


_PORT = r"0*(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
#: what :func:`check_url` takes apart from address literals, as the OpenAPI document
#: says it: http(s), a host name or IPv4 address (no user part), an optional port, and
#: no spaces or control characters anywhere
URL_PATTERN = (
    r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#@:\[\]\x00-\x20\x7f]+"
    rf"(?::(?:{_PORT})?)?(?:[/?#][^\x00-\x20\x7f]*)?$"
)


def host_refusal(host: str) -> str | None:
    """Why *host* can never be looked up (no IDNA encoding: a character no host name
    may hold, a label empty or over 63 characters), or None."""
    try:
        host.encode("idna")
    except UnicodeError as exc:
        cause = exc.__cause__ or exc.__context__ or exc
        return f"the URL's host {host!r} is not a valid host name ({cause})"
    return None


def check_url(url: str, allowed: Sequence[Network]) -> str | None:
    """Why *url* can never be a webhook target (scheme, host, an address literal that
    is refused), or None. Host names are checked again when a delivery resolves them."""
    if any(c <= " " or c == "\x7f" for c in url):
        # urlsplit would drop some of them silently (tabs, newlines, leading spaces)
        return "the URL must not contain spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a URL: {exc}"
    if parts.scheme not in ("http", "https"):
        return "the URL must start with http:// or https://"
    if not parts.hostname:
        return "the URL has no host"
    if "@" in parts.netloc:
        return "the URL must not carry a user or password"
    del port
    why = host_refusal(parts.hostname)
    if why is not None:
        return why
    try:
        literal = ipaddress.ip_address(parts.hostname)
    except ValueError:
        return None
    return address_refusal(literal, allowed)
