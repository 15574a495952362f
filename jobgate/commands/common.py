"""Shared CLI pieces: the client from the profile, KEY=VALUE parsing, the -o option."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

import typer

from jobgate.client import ApiError, Client
from jobgate.profile import Profile
from jobgate.render import Output
from plugins.resources import InvalidResource, parse_size

__all__ = ["OutputOpt", "client", "close_clients", "parse_bytes", "parse_pairs"]

OutputOpt = Annotated[
    Output,
    typer.Option(
        "--output",
        "-o",
        help="table for people; json for scripts (lists are JSON lists, objects objects).",
    ),
]


_open: list[Client] = []


def client() -> Client:
    """A client from the profile (closed by :func:`close_clients` when the command ends)."""
    made = Client(Profile.load())
    _open.append(made)
    return made


def close_clients() -> None:
    while _open:
        _open.pop().close()


def parse_pairs(items: Iterable[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` items into a dict (a clear error for anything else)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ApiError(0, "Usage", f"{what} must look like KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def parse_bytes(value: str, what: str) -> int:
    """``500g``, ``1.5TiB``, ``2048`` -> bytes (a clear error for anything else)."""
    try:
        return int(parse_size(value))
    except InvalidResource as exc:
        raise ApiError(0, "Usage", f"{what}: {exc.message}") from None
