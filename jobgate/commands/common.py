"""Shared CLI pieces: the client from the profile, KEY=VALUE and comma-list parsing, the
-o option, and the plain ``key  value`` and ``removed`` answers of templates, triggers
and webhooks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

import typer

from jobgate.client import ApiError, Client
from jobgate.profile import Profile
from jobgate.render import Output, err, print_json
from plugins.resources import InvalidResource, parse_size

__all__ = [
    "NameArg",
    "OutputOpt",
    "client",
    "close_clients",
    "parse_bytes",
    "parse_pairs",
    "print_fields",
    "print_removed",
    "split_list",
]

OutputOpt = Annotated[
    Output,
    typer.Option(
        "--output",
        "-o",
        help="Table for people; JSON for scripts (lists are JSON lists, objects objects).",
    ),
]

NameArg = Annotated[str, typer.Argument(help="Its name.")]


_open: list[Client] = []


def client() -> Client:
    """A client from the profile (closed by :func:`close_clients` when the command ends)."""
    from jobgate.sso import renewed  # a `jobgate login` key about to expire is renewed

    made = Client(renewed(Profile.load()))
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


def split_list(value: str | None) -> list[str]:
    """``a, b,,c`` -> ``["a", "b", "c"]`` (a comma-separated option; none -> ``[]``)."""
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def print_fields(pairs: list[tuple[str, object]]) -> None:
    """One ``key  value`` line a pair, the values aligned (a ``show`` for people)."""
    width = max(len(k) for k, _ in pairs)
    for key, value in pairs:
        print(f"{key.ljust(width)}  {value}")


def print_removed(name: str, output: Output, kind: str) -> None:
    """What an ``rm`` answers: ``{"name": …, "removed": true}`` or ``deleted KIND NAME``."""
    if output == Output.json:
        print_json({"name": name, "removed": True})
    else:
        err.print(f"deleted {kind} {name}", markup=False)
