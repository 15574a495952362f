"""API key scopes and lifetimes: what a key may do, and until when (pure, no I/O).

A key carries a set of scopes, or none at all: a key without scopes (every key made
before scopes existed, and keys minted from one without naming scopes) may do all its
user may. A key's scopes never add to its user's role: ``admin`` on a key means
something only when its user is an admin.

=========  ==================================================================
scope      what it allows
=========  ==================================================================
read       GET and HEAD of one's own things (sessions, logs, endpoints, folders
           and their files, templates, triggers, webhooks, keys ...)
sessions   start and stop sessions (``jobgate run``: its working-dir upload, app
           proxies, committing an image), templates, triggers and webhooks
endpoints  create, change, scale, roll back and delete endpoints and their tokens
folders    create, share, trash and purge folders; upload, move and delete files
admin      the admin routes (users, projects, policies, nodes, groups, images), and
           an admin's powers on other routes (seeing everyone's sessions ...)
=========  ==================================================================

A key minted by another key gets no more than it: its scopes are a subset of the
minting key's, and it expires no later (``within``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Final, Literal

from gateway.domain.endpoints import LIFETIME_PATTERN, parse_expiry
from gateway.domain.errors import Invalid

__all__ = [
    "ADMIN",
    "DURATION_PATTERN",
    "SCOPES",
    "TOUCH_EVERY",
    "ScopeName",
    "decode",
    "duration",
    "effective",
    "encode",
    "outlives",
    "parse_scopes",
    "when",
    "within",
]

ScopeName = Literal["read", "sessions", "endpoints", "folders", "admin"]
SCOPES: Final[tuple[ScopeName, ...]] = ("read", "sessions", "endpoints", "folders", "admin")
ADMIN: Final = "admin"

#: a key's lifetime as asked for: as an endpoint token's (``30d``, ``12h``, ``90m``,
#: ``3600s``, ``2w``, at most 10 years), or ``never``
DURATION_PATTERN: Final = "^(?:never|" + LIFETIME_PATTERN[1:-1] + ")$"

#: a key's last use is written at most this often (per key and gateway process)
TOUCH_EVERY: Final = timedelta(minutes=1)


def parse_scopes(values: Iterable[str]) -> frozenset[str]:
    """The scopes named, checked: at least one, each a known one."""
    scopes = frozenset(values)
    unknown = sorted(scopes - set(SCOPES))
    if unknown:
        raise Invalid(
            f"unknown scope {unknown[0]!r}: scopes are {', '.join(SCOPES)}", field="scopes"
        )
    if not scopes:
        raise Invalid("a key needs at least one scope", field="scopes")
    return scopes


def encode(scopes: frozenset[str] | None) -> str | None:
    """As the database keeps them: space-separated in SCOPES order (None: all)."""
    return None if scopes is None else " ".join(s for s in SCOPES if s in scopes)


def decode(text: str | None) -> frozenset[str] | None:
    return None if text is None else frozenset(text.split())


def effective(scopes: frozenset[str] | None, role: str) -> list[str]:
    """What a key with *scopes* of a user with *role* may do, in SCOPES order (no
    scopes: all its user may; ``admin`` only for an admin)."""
    return [s for s in SCOPES if (scopes is None or s in scopes) and (s != ADMIN or role == ADMIN)]


def duration(text: str) -> timedelta | None:
    """``30d`` -> 30 days; ``never`` -> None."""
    if text == "never":
        return None
    try:
        return parse_expiry(text)
    except ValueError:
        raise Invalid(
            f"{text!r} is not a lifetime: say 30d, 12h, 90m or 3600s (at most 10 years), or never",
            field="expires_in",
        ) from None


def within(have: frozenset[str] | None, want: frozenset[str] | None) -> bool:
    """Whether a key with scopes *have* may mint (or revoke) one with *want*."""
    if have is None:
        return True
    return want is not None and want <= have


def outlives(expires: datetime | None, limit: datetime | None) -> bool:
    """Whether a key expiring at *expires* would outlive one expiring at *limit*."""
    if limit is None:
        return False
    return expires is None or expires > limit


def when(at: datetime) -> str:
    """``2026-12-28T04:13:00Z``: how a refusal names a key's expiry or revocation."""
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")
