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
    "DELAY_PATTERN",
    "ENV_NAME",
    "FIRST_WORD_PATTERN",
    "IMAGE_PATTERN",
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
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"  # ASCII, as Docker's grammar
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
#: ``[registry[:port]/]name[/name...][:tag][@digest]`` (the OpenAPI document says it too)
IMAGE_PATTERN = rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?$"
_IMAGE = re.compile(IMAGE_PATTERN)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: ``+10m``, ``1h30m``, ``2d 6h``: up to four parts of up to 5 digits (a delay stays
#: within what a date can hold)
DELAY_PATTERN = r"^ *\+? *(?:[0-9]{1,5} *[smhd] *){1,4}$"
_DELAY = re.compile(DELAY_PATTERN)
_DELAY_PART = re.compile(r"([0-9]+) *([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def valid_image_reference(ref: str) -> bool:
    """``[registry[:port]/]name[/name...][:tag][@digest]``, as Docker and Podman read it."""
    return len(ref) <= 255 and bool(_IMAGE.fullmatch(ref))


def check_image(value: str) -> str:
    """*value* if it is an image reference (else ValueError)."""
    if not valid_image_reference(value):
        raise ValueError(f"not an image reference: {value!r}")
    return value


#: what a command's first word needs (the OpenAPI document says it as a pattern)
FIRST_WORD_PATTERN = "[^ \t\n\r\f\v]"


def check_arguments(value: list[str]) -> list[str]:
    """*value* if no argument holds a NUL byte and the first is not blank (else ValueError)."""
    if any("\x00" in arg for arg in value):
        raise ValueError("arguments must not contain NUL bytes")
    if value and not re.search(FIRST_WORD_PATTERN, value[0]):
        raise ValueError("the command's first word is empty")
    return value


def check_env(value: dict[str, str]) -> dict[str, str]:
    """*value* if its keys are variable names and no value holds a NUL byte (else ValueError)."""
    for key, item in value.items():
        if not ENV_NAME.fullmatch(key):
            raise ValueError(f"not an environment variable name: {key!r}")
        if "\x00" in item:
            raise ValueError(f"value of {key} contains a NUL byte")
    return value


def parse_delay(text: str) -> timedelta | None:
    """``+10m``, ``90s``, ``1h30m``, ``2d`` -> timedelta; anything else -> None."""
    if not _DELAY.fullmatch(text):
        return None
    seconds = sum(int(n) * _UNIT[u] for n, u in _DELAY_PART.findall(text))
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
