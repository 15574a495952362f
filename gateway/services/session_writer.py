"""Group commit for session creates: concurrent requests share one transaction.

A create is validated first (its reads need no transaction); its rows then wait here.
One transaction at a time writes everything that is waiting - one multi-row INSERT per
table - and the requests that arrive meanwhile go into the next one. Under a burst the
cost of a transaction (BEGIN, COMMIT and its WAL flush, the statements' round trips) is
shared by every request in it; a lone request is written at once, as before.

A batch is all or nothing; when it fails (a name or an Idempotency-Key that a concurrent
request took, a value the database refuses, a data folder moved to the trash since the
request was checked), each of its requests is written again alone, so only the one at
fault sees the error.

The batch's data folders are locked first (``FOR SHARE``, in id order): a trash or purge
of one of them (which locks it ``FOR UPDATE`` and then looks for live sessions that
mount it) either waits for this commit and then sees the new sessions, or went first
and is seen here - a create whose folder went to the trash fails with a 409 naming it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Executable, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from gateway.db.clock import clock
from gateway.db.engine import SessionFactory
from gateway.db.session_rows import history_row, kernel_rows
from gateway.db.tables import (
    DATA_FOLDERS,
    DEPENDENCIES,
    FOLDERS,
    HISTORY,
    KERNELS,
    SESSIONS,
)
from gateway.domain.errors import Conflict

__all__ = ["NewSessions", "SessionWriter"]

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
            await _lock_folders(db, batch)
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
                    history.append(history_row(row["id"], new.reason, row["created_at"]))
                    new.kernels.extend(kernel_rows(row["id"], new.cluster_size, row["created_at"]))
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


async def _lock_folders(db: AsyncConnection, batch: list[NewSessions]) -> None:
    """Lock the data folders the batch mounts; a request one of whose folders went to
    the trash (or was purged) since it was checked fails (the batch is then written
    again one request at a time: only that one fails)."""
    ids = sorted({f for new in batch for f in new.folder_ids})
    if not ids:
        return
    rows = await db.execute(
        select(DATA_FOLDERS.c.id, DATA_FOLDERS.c.trashed_at)
        .where(DATA_FOLDERS.c.id.in_(ids))
        .order_by(DATA_FOLDERS.c.id)
        .with_for_update(read=True)
    )
    usable = {folder_id for folder_id, trashed_at in rows if trashed_at is None}
    for new in batch:
        gone = [f for f in new.folder_ids if f not in usable]
        if gone:
            names = {f["id"]: f["name"] for f in new.rows[0]["folders"]["items"]}
            raise Conflict(
                f"folder {names.get(gone[0], gone[0])!r} was moved to the trash while "
                "this session was being created",
                field="folders",
            )


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
