"""The gang step: a session's ``cluster_size`` containers are placed all-or-nothing.

Each container goes through the same filters and scorers as a single one, against the
pass's state *with the containers already placed for this session*, so two containers
never share room that exists once. If any container finds no node, every container
placed for the session is given back and the session waits with the reason of the one
that failed (``no node fits: container 3 of 4: ...``).

``distinct_nodes`` puts each container on its own node (multi-node training); without it
containers may share a node when it has room for several.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from plugins.scheduling.protocols import KernelPlacer
from plugins.scheduling.types import SessionRequest

__all__ = ["AllOrNothing"]


class GangSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    distinct_nodes: bool = False


class AllOrNothing:
    name: ClassVar[str] = "all-or-nothing"
    Settings: ClassVar[type[BaseModel]] = GangSettings

    def __init__(self, settings: GangSettings) -> None:
        self.settings = settings

    def place(self, request: SessionRequest, placer: KernelPlacer) -> bool:
        taken: set[str] = set()
        for _ in range(request.cluster_size):
            kernel = placer.place(frozenset(taken) if self.settings.distinct_nodes else frozenset())
            if kernel is None:
                placer.undo()
                return False
            taken.add(kernel.node_id)
        return True
