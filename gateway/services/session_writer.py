"""Group commit for session creates: concurrent requests share one transaction.

A create is validated first (its reads need no transaction); its rows then wait here.
One transaction at a time writes everything that is waiting - one multi-row INSERT per
table - and the requests that arrive meanwhile go into the next one. Under a burst the
cost of a transaction (BEGIN, COMMIT and its WAL flush, the statements' round trips) is
shared by every request in it; a lone request is written at once, as before.

A batch is all or nothing; when it fails (a name or an Idempotency-Key that a concurrent
request took, a value the database refuses), each of its requests is written again
alone, so only the one at fault sees the error.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Executable, Table, insert
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.clock import clock
from gateway.db.engine import SessionFactory
from gateway.db.models import (
    Kernel,
    Session,
    SessionDependency,
    SessionFolder,
    StatusHistory,
    new_id,
)
from gateway.domain.status import SessionStatus

__all__ = ["NewSessions", "SessionWriter"]

SESSIONS = cast(Table, Session.__table__)
HISTORY = cast(Table, StatusHistory.__table__)
KERNELS = cast(Table, Kernel.__table__)
DEPENDENCIES = cast(Table, SessionDependency.__table__)
FOLDERS = cast(Table, SessionFolder.__table__)

#: sessions per transaction (an array larger than this is still written whole, alone)
MAX_BATCH_ROWS = 2000


@dataclass(slots=True)
class NewSessions:
    """One request's validated rows; ``created_at`` and ``kernels`` are filled in."""

    rows: list[dict[str, Any]]  # sessions rows (one, or an array's)
    cluster_size: int
    reason: str  # the first status history entry's
    deps: list[str]  # the sessions each of them depends on
    folder_ids: list[str] = field(default_factory=list)  # the data folders each mounts
    kernels: list[dict[str, Any]] = field(default_factory=list)


class SessionWriter:
    def __init__(self, db: SessionFactory) -> None:
        self.db = db
        self._waiting: list[tuple[NewSessions, asyncio.Future[None]]] = []
        self._busy = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def write(self, new: NewSessions) -> None:
        """Commit *new* (with whatever else is waiting); raises what its write raised."""
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((new, done))
        if not self._busy:
            self._busy = True
            task = asyncio.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await asyncio.shield(done)

    async def _drain(self) -> None:
        try:
            while self._waiting:
                batch: list[tuple[NewSessions, asyncio.Future[None]]] = []
                rows = 0
                while self._waiting and (not batch or rows < MAX_BATCH_ROWS):
                    item = self._waiting.pop(0)
                    batch.append(item)
                    rows += len(item[0].rows)
                await self._commit_batch(batch)
        finally:
            self._busy = False

    async def _commit_batch(self, batch: list[tuple[NewSessions, asyncio.Future[None]]]) -> None:
        try:
            await self._insert([new for new, _ in batch])
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch[0][1], exc)
                return
            # find the one at fault (a name or key a concurrent request took, a value the
            # database refuses): each alone, so only that request sees its error
            for item in batch:
                await self._commit_batch([item])
            return
        for _, done in batch:
            _settle(done, None)

    async def _insert(self, batch: list[NewSessions]) -> None:
        params = [row for new in batch for row in new.rows]
        async with self.db() as session, session.begin():
            db = await session.connection()  # Core statements: no ORM bookkeeping
            stamped = await db.execute(
                _insert_sessions(session), params if len(params) > 1 else params[0]
            )
            for row, (created, changed) in zip(params, stamped, strict=True):
                row["created_at"], row["status_changed_at"] = created, changed
            history: list[dict[str, Any]] = []
            kernels: list[dict[str, Any]] = []
            deps: list[dict[str, Any]] = []
            folders: list[dict[str, Any]] = []
            for new in batch:
                new.kernels = []
                for row in new.rows:
                    history.append(_history(row["id"], new.reason, row["created_at"]))
                    new.kernels.extend(_kernels(row["id"], new.cluster_size, row["created_at"]))
                    deps.extend({"session_id": row["id"], "depends_on_id": d} for d in new.deps)
                    folders.extend(
                        {"session_id": row["id"], "folder_id": f} for f in new.folder_ids
                    )
                kernels.extend(new.kernels)
            await db.execute(insert(HISTORY), history)
            await db.execute(insert(KERNELS), kernels)
            if deps:
                await db.execute(insert(DEPENDENCIES), deps)
            if folders:
                await db.execute(insert(FOLDERS), folders)


def _settle(done: asyncio.Future[None], exc: BaseException | None) -> None:
    if done.done():
        return
    if exc is None:
        done.set_result(None)
    else:
        done.set_exception(exc)
        done.exception()  # retrieved: no warning when its request went away meanwhile


_STATEMENTS: dict[str, Executable] = {}


def _insert_sessions(db: AsyncSession) -> Executable:
    """INSERT ... RETURNING both stamps, each row's from the database's clock (read twice:
    PostgreSQL's ``clock_timestamp()`` moves between them, and the answer must say what
    was stored): compiled once per dialect, bound parameters per row (no ORM bookkeeping
    on the hot path)."""
    dialect = db.get_bind().dialect.name
    statement = _STATEMENTS.get(dialect)
    if statement is None:
        now = clock(db)
        statement = _STATEMENTS[dialect] = (
            insert(SESSIONS)
            .values(created_at=now, status_changed_at=now)
            .returning(
                SESSIONS.c.created_at, SESSIONS.c.status_changed_at, sort_by_parameter_order=True
            )
        )
    return statement


def _history(session_id: str, reason: str, now: datetime) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "from_status": None,
        "to_status": SessionStatus.PENDING,
        "reason": reason,
        "created_at": now,
    }


def _kernels(session_id: str, size: int, now: datetime) -> list[dict[str, Any]]:
    return [
        {"id": new_id(), "session_id": session_id, "cluster_idx": index, "updated_at": now}
        for index in range(size)
    ]
