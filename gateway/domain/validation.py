"""Input rules of the domain: image references, env names, start times, mount roots.

The request models (``gateway.domain.requests``, re-exported by ``gateway.api.schemas``)
and the services use them; they raise nothing framework-specific (``check_*``: ValueError,
which pydantic reports on the field).
"""

from __future__ import annotations

import posixpath
import re
from datetime import UTC, datetime, timedelta

__all__ = [
    "ENV_NAME",
    "check_arguments",
    "check_env",
    "check_image",
    "parse_delay",
    "parse_start",
    "valid_image_reference",
    "within_roots",
]

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_IMAGE = re.compile(rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DELAY = re.compile(r"^\+?\s*((?:\d+\s*[smhd]\s*)+)$")
_DELAY_PART = re.compile(r"(\d+)\s*([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def valid_image_reference(ref: str) -> bool:
    """``[registry[:port]/]name[/name...][:tag][@digest]``, as Docker and Podman read it."""
    return len(ref) <= 255 and bool(_IMAGE.match(ref))


def check_image(value: str) -> str:
    """*value* if it is an image reference (else ValueError)."""
    if not valid_image_reference(value):
        raise ValueError(f"not an image reference: {value!r}")
    return value


def check_arguments(value: list[str]) -> list[str]:
    """*value* if no argument holds a NUL byte (else ValueError)."""
    if any("\x00" in arg for arg in value):
        raise ValueError("arguments must not contain NUL bytes")
    return value


def check_env(value: dict[str, str]) -> dict[str, str]:
    """*value* if its keys are variable names and no value holds a NUL byte (else ValueError)."""
    for key, item in value.items():
        if not ENV_NAME.match(key):
            raise ValueError(f"not an environment variable name: {key!r}")
        if "\x00" in item:
            raise ValueError(f"value of {key} contains a NUL byte")
    return value


def parse_delay(text: str) -> timedelta | None:
    """``+10m``, ``90s``, ``1h30m``, ``2d`` -> timedelta; anything else -> None."""
    match = _DELAY.match(text.strip())
    if not match:
        return None
    seconds = sum(int(n) * _UNIT[u] for n, u in _DELAY_PART.findall(match.group(1)))
    return timedelta(seconds=seconds)


def parse_start(text: str) -> datetime | timedelta:
    """An absolute ISO 8601 time (UTC if no offset) or a relative delay."""
    delay = parse_delay(text)
    if delay is not None:
        return delay
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (use ISO 8601 like 2026-11-20T14:00:00Z, or +10m, 1h30m)"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def within_roots(path: str, roots: list[str]) -> bool:
    """*path* (absolute, normalised) lies inside one of *roots*."""
    norm = posixpath.normpath(path)
    for root in roots:
        base = posixpath.normpath(root)
        if norm == base or norm.startswith(base.rstrip("/") + "/"):
            return True
    return False
