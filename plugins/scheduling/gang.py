"""The gang step: a session's ``cluster_size`` containers are placed all-or-nothing.

Each container goes through the same filters and scorers as a single one, against the
pass's state *with the containers already placed for this session*, so two containers
never share room that exists once. If any container finds no node, every container
placed for the session is given back and the session waits with the reason of the one
that failed (``no node fits: container 3 of 4: ...``).

A session's ``cluster_mode`` (docs/cluster-sessions.md) picks the rule:

* ``single-node``: every container on one node. The first container goes where the
  scorers say; the others must fit on that same node, else the next candidate node is
  tried (up to ``together_tries``), else the session waits ("single-node: no node has
  room for all 3 containers").
* ``multi-node``: on one node when one fits all (less network latency), as above; else
  spread over nodes of the group, each container where the scorers say.
* none (older clients, the scheduler's own tests): as multi-node without the one-node
  try, which is what the scorers decide.

``distinct_nodes`` puts each container on its own node (multi-node training); without it
containers may share a node when it has room for several.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from plugins.scheduling.protocols import KernelPlacer
from plugins.scheduling.types import SessionRequest

__all__ = ["AllOrNothing"]


class GangSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    distinct_nodes: bool = False
    #: nodes tried as the one node of a single-node (or one-node multi-node) session
    together_tries: int = Field(default=8, ge=1, le=1000)


class AllOrNothing:
    name: ClassVar[str] = "all-or-nothing"
    Settings: ClassVar[type[BaseModel]] = GangSettings

    def __init__(self, settings: GangSettings) -> None:
        self.settings = settings

    def place(self, request: SessionRequest, placer: KernelPlacer) -> bool:
        mode = request.cluster_mode if request.cluster_size > 1 else None
        if mode == "single-node" or (mode == "multi-node" and not self.settings.distinct_nodes):
            if self._together(request, placer):
                return True
            if mode == "single-node":
                placer.refuse(
                    f"single-node: no node has room for all {request.cluster_size} containers"
                )
                return False
        return self._spread(request, placer)

    def _together(self, request: SessionRequest, placer: KernelPlacer) -> bool:
        """Every container on one node: try the scorers' favourite nodes in turn."""
        tried: set[str] = set()
        for _ in range(self.settings.together_tries):
            first = placer.place(frozenset(tried))
            if first is None:
                placer.undo()
                return False
            for _ in range(request.cluster_size - 1):
                if placer.place(only=first.node_id) is None:
                    break
            else:
                return True
            placer.undo()
            tried.add(first.node_id)
        return False

    def _spread(self, request: SessionRequest, placer: KernelPlacer) -> bool:
        taken: set[str] = set()
        for _ in range(request.cluster_size):
            kernel = placer.place(frozenset(taken) if self.settings.distinct_nodes else frozenset())
            if kernel is None:
                placer.undo()
                return False
            taken.add(kernel.node_id)
        return True
