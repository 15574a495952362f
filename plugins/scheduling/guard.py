"""Every plugin call of a pass, wrapped so that a crash names its plugin.

The pipeline hands the planner guarded plugins (kube-scheduler's framework runtime runs
each plugin through one such wrapper): a guarded call is the plugin's own call inside a
``try``; an exception other than a :class:`~.errors.SchedulerError` comes out as
:class:`~.errors.PluginFailure` naming ``<kind>.<name>`` (``filter.exploding``), the
original as its ``cause``. The planner turns that into a failed pass
(:class:`~.errors.PlanError`), which the gateway logs and retries next tick.

A wrapper's price is one extra call per plugin call; that is nothing for validators,
sequencers, scorers and the gang step, but filters run for every node a search looks
at, so they are guarded at their call sites instead (:func:`filter_failed`; a ``try``
costs nothing in CPython 3.11 until something raises). A failure raised by a plugin
that another plugin called (a filter inside the gang step's search) keeps the inner
plugin's name.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel

from plugins.scheduling.errors import PluginFailure, SchedulerError
from plugins.scheduling.protocols import Filter, KernelPlacer, Verdict
from plugins.scheduling.state import NodeView, PassContext, Shape
from plugins.scheduling.types import SessionRequest

__all__ = [
    "GuardedGang",
    "GuardedScorer",
    "GuardedSequencer",
    "GuardedValidator",
    "filter_failed",
]


class _Guarded:
    """What every wrapper shares: the plugin, its ``kind.name``, its other attributes."""

    kind: ClassVar[str]

    def __init__(self, plugin: Any) -> None:
        self.plugin = plugin
        self.name: str = plugin.name
        self.label = f"{self.kind}.{plugin.name}"
        self.Settings: type[BaseModel] = plugin.Settings

    def __getattr__(self, attr: str) -> Any:  # settings, scan, ... of the plugin itself
        return getattr(self.plugin, attr)

    def __repr__(self) -> str:
        return f"<guarded {self.label}>"

    def _failed(self, exc: Exception) -> PluginFailure:
        return PluginFailure(self.label, exc)


class GuardedValidator(_Guarded):
    kind = "validator"

    def check(self, request: SessionRequest, ctx: PassContext) -> Verdict | None:
        try:
            verdict: Verdict | None = self.plugin.check(request, ctx)
        except SchedulerError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        return verdict


class GuardedSequencer(_Guarded):
    kind = "sequencer"

    def order(self, band: list[SessionRequest], ctx: PassContext) -> Iterator[SessionRequest]:
        try:  # the order is lazy: the plugin's code runs as it is iterated
            yield from self.plugin.order(band, ctx)
        except SchedulerError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc

    def blocks(self, request: SessionRequest, ctx: PassContext) -> bool:
        try:
            return bool(self.plugin.blocks(request, ctx))
        except SchedulerError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc


def filter_failed(f: Filter, exc: Exception) -> PluginFailure:
    """The failure of filter *f*: filters are guarded where they are called.

    A pass calls filters hundreds of thousands of times; a wrapper object would add a
    call to each (a quarter more CPU for a pass of 50,000 sessions), while a ``try`` at
    the call site costs nothing until something raises. Callers write::

        try:
            rejection = f.check(node, shape, ctx)
        except Exception as exc:
            raise filter_failed(f, exc) from exc
    """
    return PluginFailure(f"filter.{f.name}", exc)


class GuardedScorer(_Guarded):
    kind = "scorer"

    def score(self, nodes: Sequence[NodeView], shape: Shape, ctx: PassContext) -> list[float]:
        try:
            scores: list[float] = self.plugin.score(nodes, shape, ctx)
        except SchedulerError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        if len(scores) != len(nodes):
            raise PluginFailure(
                self.label,
                ValueError(f"returned {len(scores)} scores for {len(nodes)} nodes"),
            )
        return scores


class GuardedGang(_Guarded):
    kind = "gang"

    def place(self, request: SessionRequest, placer: KernelPlacer) -> bool:
        try:
            return bool(self.plugin.place(request, placer))
        except SchedulerError:
            raise  # a filter or scorer that failed inside the placer keeps its own name
        except Exception as exc:
            raise self._failed(exc) from exc
