"""One value remembered for a while: what the create checks read rarely changes."""

from __future__ import annotations

import math
import time
from typing import Generic, TypeVar

__all__ = ["Timed"]

T = TypeVar("T")


class Timed(Generic[T]):
    """A value and when it was read: ``current()`` for *ttl* seconds after ``put``;
    a new one starts out of date (its *initial* value is what ``value`` says until then)."""

    def __init__(self, ttl: float, initial: T) -> None:
        self.ttl = ttl
        self.value = initial
        self._stamp = -math.inf

    def current(self) -> bool:
        return time.monotonic() - self._stamp < self.ttl

    def put(self, value: T) -> T:
        self.value, self._stamp = value, time.monotonic()
        return value
