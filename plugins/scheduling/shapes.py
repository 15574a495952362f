"""The pass's shapes: one per distinct (filter keys, cluster size), found per session.

A shape is keyed by what every filter's ``key()`` returns for the request, plus its
``cluster_size``: equal keys, equal verdicts, one shared search state (:class:`.Shape`).
Asking every filter for its key costs more than most placements do, so when every
filter names the request fields its key reads (``key_reads``, as the built-in ones
do), a session's shape is looked up by those fields first::

    request ──those fields' values──▶ known combination? ──▶ its shape
                                           │ no
                                           ▼
                       every filter's key() ──▶ the shape of those keys (made once)

Equal field values give equal keys (a key reads nothing else), so the lookup finds
the shape the keys would; values that differ but give equal keys (``{"a": "1", "b":
"2"}`` and ``{"b": "2", "a": "1"}``, two equal ``requested`` maps) only miss the first
lookup and reach the same shape through the keys.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import fields
from operator import attrgetter
from typing import Any

from plugins.scheduling.guard import failed
from plugins.scheduling.pipeline import Pipeline
from plugins.scheduling.slots import SlotTable
from plugins.scheduling.state import Shape
from plugins.scheduling.types import SessionRequest

__all__ = ["Shapes", "signature"]

#: SessionRequest fields whose values are not hashable as they are
_MAPPINGS = frozenset(f.name for f in fields(SessionRequest) if str(f.type).startswith("dict"))
_SEQUENCES = frozenset(f.name for f in fields(SessionRequest) if str(f.type).startswith("list"))


def signature(filters: tuple[Any, ...]) -> Callable[[SessionRequest], Hashable] | None:
    """What of a request decides its shape, as a function; None when some filter does
    not say what its key reads (then only its keys do)."""
    known = {f.name for f in fields(SessionRequest)}
    read: set[str] = set()
    for f in filters:
        names = getattr(f, "key_reads", None)
        if not isinstance(names, tuple) or not all(n in known for n in names):
            return None
        read.update(names)
    read.add("cluster_size")
    plain = sorted(read - _MAPPINGS - _SEQUENCES)
    mappings = sorted(read & _MAPPINGS)
    sequences = sorted(read & _SEQUENCES)
    values: Callable[[SessionRequest], Hashable] = attrgetter(*plain)  # a value or a tuple
    if not mappings and not sequences:
        return values
    if len(mappings) == 1 and not sequences:  # the built-in filters: constraints
        mapping = attrgetter(mappings[0])

        def of_one(request: SessionRequest) -> Hashable:
            return (values(request), tuple(mapping(request).items()))

        return of_one

    def of(request: SessionRequest) -> Hashable:
        return (
            values(request),
            *(tuple(getattr(request, n).items()) for n in mappings),
            *(tuple(getattr(request, n)) for n in sequences),
        )

    return of


class Shapes:
    """The shapes of one pass (see the module docstring)."""

    def __init__(self, pipeline: Pipeline, slots: SlotTable, device_slots: frozenset[int]) -> None:
        self.filters = pipeline.filters
        self.statics = len(pipeline.static_filters)
        self.slots, self.device_slots = slots, device_slots
        self.by_keys: dict[Hashable, Shape] = {}
        self.by_fields: dict[Hashable, Shape] = {}
        self.signature = signature(self.filters)

    def get(self, request: SessionRequest) -> Shape:
        """The shape of *request* (made on first use)."""
        signature = self.signature
        if signature is None:
            return self._by_keys(request)
        seen = signature(request)
        shape = self.by_fields.get(seen)
        if shape is None:
            shape = self.by_fields[seen] = self._by_keys(request)
        return shape

    def _by_keys(self, request: SessionRequest) -> Shape:
        filters = self.filters
        try:
            keys = tuple([f.key(request) for f in filters])
        except Exception:
            for f in filters:  # which one (keys are pure: asking again is harmless)
                try:
                    f.key(request)
                except Exception as exc:
                    raise failed("filter", f, exc) from exc
            raise
        key = (keys, request.cluster_size)
        shape = self.by_keys.get(key)
        if shape is None:
            static_key = keys[: self.statics]
            shape = Shape(key, static_key, request, self.slots, self.device_slots)
            self.by_keys[key] = shape
        return shape
