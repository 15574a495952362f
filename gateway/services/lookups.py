"""Shared reads for session creates: concurrent requests share one query per kind.

What nearly every create reads - its resource group, the caller's automount folders,
its image, and (with a ``max_pending`` policy) how many sessions the caller has pending
- is asked for here. One database session at a time answers everything that is asked,
one statement per kind with the union of the keys (``IN (...)``), and the requests that
ask meanwhile share the next one: under a burst that is a few statements per round trip
instead of a database session (BEGIN, statements, ROLLBACK) per request; a lone request
is answered at once, as before.

A request is only answered by a read that started after it asked, so it sees every
commit that preceded it (a group or a folder made just before, a policy's effect), as
a read of its own would.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from sqlalchemy import func, select

from gateway.db.engine import SessionFactory
from gateway.db.models import Image, ResourceGroup, Session
from gateway.domain.status import SessionStatus
from gateway.services.folders import AutomountFolder, automount_folders

__all__ = ["Ask", "Facts", "Lookups"]


@dataclass(frozen=True, slots=True)
class Ask:
    """What one create needs read."""

    user_id: str
    group: str
    image: str | None = None
    automount: bool = False
    pending: bool = False  # the user's pending sessions, counted


@dataclass(frozen=True, slots=True)
class Facts:
    """The answer to one :class:`Ask` (rows are detached: read them, never change them)."""

    group: ResourceGroup | None
    image: Image | None
    automount: list[AutomountFolder]
    pending: int


@dataclass(slots=True)
class _Batch:
    done: asyncio.Future[_Answers]  # set once the batch is read
    groups: set[str] = field(default_factory=set)
    images: set[str] = field(default_factory=set)
    automount: set[str] = field(default_factory=set)  # user ids
    pending: set[str] = field(default_factory=set)  # user ids

    def add(self, ask: Ask) -> None:
        self.groups.add(ask.group)
        if ask.image:
            self.images.add(ask.image)
        if ask.automount:
            self.automount.add(ask.user_id)
        if ask.pending:
            self.pending.add(ask.user_id)


@dataclass(frozen=True, slots=True)
class _Answers:
    groups: dict[str, ResourceGroup]
    images: dict[str, Image]
    automount: dict[str, list[AutomountFolder]]
    pending: dict[str, int]

    def facts(self, ask: Ask) -> Facts:
        return Facts(
            group=self.groups.get(ask.group),
            image=self.images.get(ask.image) if ask.image else None,
            automount=self.automount.get(ask.user_id, []) if ask.automount else [],
            pending=self.pending.get(ask.user_id, 0),
        )


class Lookups:
    def __init__(self, db: SessionFactory) -> None:
        self.db = db
        self._next: _Batch | None = None  # what waits for the next read
        self._busy = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def fetch(self, ask: Ask) -> Facts:
        """What *ask* needs, read after this call began; raises what the read raised."""
        batch = self._next
        if batch is None:
            batch = self._next = _Batch(done=asyncio.get_running_loop().create_future())
            if not self._busy:
                self._busy = True
                task = asyncio.create_task(self._drain())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        batch.add(ask)
        answers = await asyncio.shield(batch.done)
        return answers.facts(ask)

    async def _drain(self) -> None:
        try:
            while (batch := self._next) is not None:
                self._next = None
                try:
                    answers = await self._read(batch)
                except asyncio.CancelledError:  # shutting down: so are they
                    batch.done.cancel()
                    raise
                except Exception as exc:  # every request of the batch sees it
                    batch.done.set_exception(exc)
                    batch.done.exception()  # retrieved: no warning if all went away
                else:
                    batch.done.set_result(answers)
        finally:
            self._busy = False

    async def _read(self, batch: _Batch) -> _Answers:
        automount: dict[str, list[AutomountFolder]] = {}
        pending: dict[str, int] = {}
        async with self.db() as db:
            groups = {
                row.name: row
                for row in (
                    await db.execute(
                        select(ResourceGroup).where(ResourceGroup.name.in_(sorted(batch.groups)))
                    )
                ).scalars()
            }
            images: dict[str, Image] = {}
            if batch.images:
                rows = await db.execute(select(Image).where(Image.name.in_(sorted(batch.images))))
                images = {row.name: row for row in rows.scalars()}
            if batch.automount:
                automount = await automount_folders(db, sorted(batch.automount))
            if batch.pending:
                counts = await db.execute(
                    select(Session.owner_id, func.count())
                    .where(
                        Session.owner_id.in_(sorted(batch.pending)),
                        Session.status == SessionStatus.PENDING,
                    )
                    .group_by(Session.owner_id)
                )
                pending = {owner: count for owner, count in counts}
        return _Answers(groups, images, automount, pending)
