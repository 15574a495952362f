"""Sequencers: which pending session the planner tries next.

The planner splits the queue into **priority bands** (0-100, higher first) and asks the
sequencer to order each band; a band is handed over oldest first (``created_at``, then
id). So every sequencer, including a third-party one, honours priority.

* ``fifo`` - oldest first; a session that does not fit *blocks* every session after it
  (strict order, head-of-line blocking included - that is what FIFO promises).
* ``heuristic-fifo`` - oldest first, with a bounded head-of-line rule. A session that
  did not fit blocks the ones behind it only while ``attempts < max_skips`` (its first
  ``max_skips`` failed passes: the queue waits so freed room goes to it), then stops
  blocking (sessions behind it may backfill), and from ``attempts >= reserve_after``
  blocks again until it fits, so that backfill cannot starve it forever: freed room
  accumulates for it. It keeps its place at the head throughout, so it is tried first
  every pass. ``attempts`` is ``SessionRequest.attempts``, counted by the gateway.
* ``lifo`` - newest first; never blocks.
* ``drf`` - dominant resource fairness: the project with the smallest dominant share
  (largest fraction of any slot of the cluster it holds, counting placements made
  earlier in this pass) goes first, within it the user with the smallest one, then
  that user's oldest session. ``level`` chooses user-only, project-only or both.
  Never blocks.
* ``fair-share`` - Slurm's multifactor priority with its classic fair-share factor:
  ``w_fs x 2^(-U/S) + w_prio x priority/100 + w_age x min(age/max_age, 1)``, highest
  first, where U is the decayed historical usage of the session's project (then of its
  user within the project) and S its share (:mod:`.fairshare`, docs/fair-share.md). It
  orders the whole queue at once (``whole_queue``): priority is one of its terms, not a
  band. Never blocks; a session that waits says when its project is over its share.

A session that could never fit (``unschedulable``: no node of the group could hold it
even when empty) never blocks anyone, whatever the sequencer.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from plugins.scheduling.fairshare import (
    FairShareSettings,
    FairShareView,
    multifactor,
    pair_factors,
)
from plugins.scheduling.reasons import utc
from plugins.scheduling.state import Account, PassContext
from plugins.scheduling.types import SessionRequest

__all__ = [
    "DrfSequencer",
    "FairShareSequencer",
    "FifoSequencer",
    "HeuristicFifoSequencer",
    "LifoSequencer",
]


class NoSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FifoSequencer:
    name: ClassVar[str] = "fifo"
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init__(self, settings: BaseModel) -> None:
        self.settings = settings

    def order(self, band: list[SessionRequest], ctx: PassContext) -> Iterator[SessionRequest]:
        return iter(band)

    def blocks(self, request: SessionRequest, ctx: PassContext) -> bool:
        return True


class HeuristicFifoSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: failed passes during which the head still blocks the sessions behind it
    max_skips: int = Field(default=3, ge=0)
    #: failed passes after which it blocks again until it fits (anti-starvation)
    reserve_after: int = Field(default=30, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> HeuristicFifoSettings:
        if self.reserve_after <= self.max_skips:
            raise ValueError("reserve_after must be larger than max_skips")
        return self


class HeuristicFifoSequencer:
    name: ClassVar[str] = "heuristic-fifo"
    Settings: ClassVar[type[BaseModel]] = HeuristicFifoSettings

    def __init__(self, settings: HeuristicFifoSettings) -> None:
        self.settings = settings

    def order(self, band: list[SessionRequest], ctx: PassContext) -> Iterator[SessionRequest]:
        return iter(band)

    def blocks(self, request: SessionRequest, ctx: PassContext) -> bool:
        s = self.settings
        return request.attempts < s.max_skips or request.attempts >= s.reserve_after


class LifoSequencer:
    name: ClassVar[str] = "lifo"
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init__(self, settings: BaseModel) -> None:
        self.settings = settings

    def order(self, band: list[SessionRequest], ctx: PassContext) -> Iterator[SessionRequest]:
        return reversed(band)

    def blocks(self, request: SessionRequest, ctx: PassContext) -> bool:
        return False


class DrfSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: "project-user": projects first, users within them; "user" or "project": one level
    level: Literal["project-user", "user", "project"] = "project-user"


class _Fair:
    """A min-heap of names by share, re-keyed lazily (shares only grow in a pass)."""

    def __init__(self, names: list[str], share: Callable[[str], float]) -> None:
        self.share = share
        self.heap = [(share(n), n) for n in names]
        heapq.heapify(self.heap)

    def pop(self) -> str:
        while True:
            old, name = heapq.heappop(self.heap)
            now = self.share(name)
            if now == old or not self.heap or (now, name) <= self.heap[0]:
                return name
            heapq.heappush(self.heap, (now, name))

    def push(self, name: str) -> None:
        heapq.heappush(self.heap, (self.share(name), name))

    def __bool__(self) -> bool:
        return bool(self.heap)


class DrfSequencer:
    name: ClassVar[str] = "drf"
    Settings: ClassVar[type[BaseModel]] = DrfSettings

    def __init__(self, settings: DrfSettings) -> None:
        self.settings = settings

    def order(self, band: list[SessionRequest], ctx: PassContext) -> Iterator[SessionRequest]:
        level = self.settings.level
        queues: dict[str, dict[str, deque[SessionRequest]]] = {}
        for s in band:
            project = "" if level == "user" else (s.project or "")
            user = "" if level == "project" else s.owner
            queues.setdefault(project, {}).setdefault(user, deque()).append(s)

        def share_of(account: Callable[[str], Account]) -> Callable[[str], float]:
            return lambda name: ctx.share(account(name))

        def project_share(name: str) -> float:
            return 0.0 if level == "user" else ctx.share(ctx.project(name or None))

        projects = _Fair(sorted(queues), project_share)
        users = {p: _Fair(sorted(us), share_of(ctx.user)) for p, us in queues.items()}
        while projects:
            project = projects.pop()
            fair = users[project]
            user = fair.pop()
            queue = queues[project][user]
            yield queue.popleft()
            if queue:
                fair.push(user)
            if fair:
                projects.push(project)

    def blocks(self, request: SessionRequest, ctx: PassContext) -> bool:
        return False


class FairShareSequencer:
    name: ClassVar[str] = "fair-share"
    Settings: ClassVar[type[BaseModel]] = FairShareSettings
    #: the planner hands over the whole queue as one band (priority is a term here)
    whole_queue: ClassVar[bool] = True

    def __init__(self, settings: FairShareSettings) -> None:
        self.settings = settings

    def order(self, band: list[SessionRequest], ctx: PassContext) -> Iterator[SessionRequest]:
        factors = self._factors(band, ctx)
        now, settings = utc(ctx.now), self.settings

        def score(s: SessionRequest) -> float:
            fs = factors[(s.project or "", s.owner)]
            return -multifactor(fs, s.priority, (now - utc(s.created_at)).total_seconds(), settings)

        return iter(sorted(band, key=score))  # stable: oldest first among equals

    def _factors(
        self, band: list[SessionRequest], ctx: PassContext
    ) -> dict[tuple[str, str], float]:
        """(project, user) -> its fair-share factor; project -> its own, kept for explain."""
        view: FairShareView = ctx.snapshot.fair_share or FairShareView()
        pairs, own = pair_factors(view, {(s.project or "", s.owner) for s in band})
        ctx.scratch[self.name] = own
        return pairs

    def blocks(self, request: SessionRequest, ctx: PassContext) -> bool:
        return False

    def explain(self, request: SessionRequest, ctx: PassContext) -> str | None:
        """Why others went first, when the session's project is over its share."""
        own: dict[str, float] = ctx.scratch.get(self.name, {})
        project = request.project or ""
        found = own.get(project)
        if found is None or found >= 0.5:
            return None
        name = ctx.project_name(project) if project else "(no project)"
        return f"project {name} is over its fair share (factor {found:.2f})"
