"""Every plugin call of a pass, wrapped so that a crash names its plugin.

The pipeline hands the planner guarded plugins (kube-scheduler's framework runtime runs
each plugin through one such wrapper): a guarded call is the plugin's own call inside a
``try``; an exception other than a :class:`~.errors.SchedulerError` comes out as
:class:`~.errors.PluginFailure` naming ``<kind>.<name>`` (``filter.exploding``), the
original as its ``cause``. The planner turns that into a failed pass
(:class:`~.errors.PlanError`), which the gateway logs and retries next tick.

Two ways, one rule: the sequencer, whose order is lazy (its code runs while the planner
iterates), is a wrapped object; validators, filters, scorers and the gang step, called
for every session, node and search, are guarded by a ``try`` where the planner calls them
(:func:`failed`), which costs nothing in CPython 3.11 until something raises, where a
wrapper would cost one more call each. A failure raised by a plugin
that another plugin called (a filter inside the gang step's search) keeps the inner
plugin's name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import BaseModel

from plugins.scheduling.errors import PluginFailure, SchedulerError
from plugins.scheduling.state import PassContext
from plugins.scheduling.types import SessionRequest

__all__ = ["GuardedSequencer", "failed"]


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


class GuardedSequencer(_Guarded):
    kind = "sequencer"

    def __init__(self, plugin: Any) -> None:
        super().__init__(plugin)
        #: optional: the planner hands the whole queue as one band (not per priority)
        self.whole_queue = bool(getattr(plugin, "whole_queue", False))
        #: optional ``explain(request, ctx) -> str | None``: words added to a waiting
        #: session's reason (why others went first)
        self.explains = callable(getattr(plugin, "explain", None))

    def explain(self, request: SessionRequest, ctx: PassContext) -> str | None:
        if not self.explains:
            return None
        try:
            note = self.plugin.explain(request, ctx)
        except SchedulerError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        return str(note) if note else None

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


def failed(kind: str, plugin: Any, exc: Exception) -> PluginFailure:
    """The failure of *plugin*, a ``kind`` plugin guarded where it is called.

    Validators, filters and scorers run for every session, node or search of a pass; a
    wrapper object would add a call to each (a quarter more CPU for a pass of 50,000
    sessions when filters were wrapped), while a ``try`` at the call site costs nothing
    until something raises. Callers write::

        try:
            rejection = f.check(node, shape, ctx)
        except Exception as exc:
            raise failed("filter", f, exc) from exc
    """
    return PluginFailure(f"{kind}.{plugin.name}", exc)
