"""The one way a test waits for something: ask again until the answer is yes.

``until`` (async) and ``until_sync`` (for the sync e2e tests) call ``probe`` every
``interval`` seconds until it returns something truthy, and return that. A probe that
returns an awaitable is awaited. A probe that knows the wait is hopeless (the session
already failed) raises its own AssertionError, which goes straight to the test. When
``timeout`` runs out they raise AssertionError naming ``what`` (a string, or a function
called then, for a message built from what the probe last saw) and the probe's last
answer.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar, overload

T = TypeVar("T")

What = str | Callable[[], str]


def _pauses(timeout: float, interval: float) -> Iterator[float]:
    """One item per try: the pause after it; the last try comes at or after the deadline."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        yield min(interval, left)
    yield 0.0


def _late(what: What, timeout: float, last: object) -> AssertionError:
    said = what if isinstance(what, str) else what()
    return AssertionError(f"{said} (not within {timeout:g}s; last seen: {last!r})")


@overload
async def until(
    probe: Callable[[], Awaitable[T | None]], *, timeout: float, interval: float = ..., what: What
) -> T: ...


@overload
async def until(
    probe: Callable[[], T | None], *, timeout: float, interval: float = ..., what: What
) -> T: ...


async def until(
    probe: Callable[[], Any], *, timeout: float, interval: float = 0.05, what: What
) -> Any:
    last: object = None
    for pause in _pauses(timeout, interval):
        got = probe()
        last = await got if inspect.isawaitable(got) else got
        if last:
            return last
        await asyncio.sleep(pause)
    raise _late(what, timeout, last)


def until_sync(
    probe: Callable[[], T | None], *, timeout: float, interval: float = 0.05, what: What
) -> T:
    last: T | None = None
    for pause in _pauses(timeout, interval):
        if (last := probe()) is not None and last:
            return last
        time.sleep(pause)
    raise _late(what, timeout, last)
