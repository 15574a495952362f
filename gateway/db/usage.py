"""Usage records follow the kernels: one row per kernel attempt, from its start to its end.

A kernel's own columns say when an attempt ran: ``started_at`` is stamped once, when it
is RUNNING (or an exit proves it ran), ``ended_at`` once when it ends
(:func:`gateway.lifecycle.end_kernel`), and a lost node's retry moves it to a new
``attempt`` (the reconciler's ``place_again``) with both cleared. Rather than ask every
path that does so (the event consumer, the reconciler, termination, those to come) to
remember the bill, a listener on every ORM flush looks at the kernels the flush writes
and, on the same connection, so in the same transaction::

    started_at None -> t          INSERT usage (kernel, attempt, owner, project, group,
                                  node, slots, started_at = t, ended_at = the kernel's)
    ended_at None -> t            UPDATE usage SET ended_at = t (that attempt, still open)
    attempt a -> a+1, a started   UPDATE usage SET ended_at = updated_at (attempt a)

A record is made at most once per attempt (its key; a repeat is ignored) and closed at
most once (``ended_at IS NULL``), so a batch handled twice, a restart or a retry neither
loses nor counts anything twice. Kernels changed by Core statements are not seen: none
changes a started kernel's times that way (the plan applier's bulk update only cancels
kernels that never ran).

The closed records' slot-seconds go to :data:`gateway.metrics.USAGE_SECONDS` once their
transaction commits (dropped if it rolls back).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, cast

from sqlalchemy import Table, bindparam, event, inspect, select, update
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import UOWTransaction
from sqlalchemy.orm.state import InstanceState

from gateway.db.models import Kernel, Project, Session, Usage
from gateway.db.upsert import insert_ignoring
from gateway.metrics import USAGE_SECONDS

__all__ = ["USAGE", "closed_amounts"]

USAGE = cast(Table, Usage.__table__)
_CLOSED = "jobgate.usage.closed"  # Session.info: (project, slot, seconds) to count on commit

_CLOSE_SQL = update(USAGE).where(
    USAGE.c.kernel_id == bindparam("b_kernel"),
    USAGE.c.attempt == bindparam("b_attempt"),
    USAGE.c.ended_at.is_(None),
)


def _before(state: InstanceState[Kernel], key: str) -> Any:
    """The column's value before this flush (None for a new kernel, or one never loaded:
    an attempt's record is then made again, which its key ignores)."""
    history = state.attrs[key].history
    if history.deleted:
        return history.deleted[0]
    return history.unchanged[0] if history.unchanged else None


def closed_amounts(slots: dict[str, Any], started: datetime, ended: datetime) -> dict[str, float]:
    """A record's slot-seconds: each amount times the seconds it was held."""
    seconds = Decimal(str(max(0.0, (ended - started).total_seconds())))
    return {slot: float(Decimal(str(amount)) * seconds) for slot, amount in slots.items()}


#: a record to close: (kernel, attempt, slots held, started, ended)
_Close = tuple[Kernel, int, dict[str, Any], datetime, datetime]


def _moves(kernel: Kernel) -> tuple[bool, list[_Close]]:
    """Whether this flush starts a record for *kernel*, and the records it closes."""
    state = inspect(kernel)
    closes: list[_Close] = []
    was_attempt = _before(state, "attempt")
    was_started = _before(state, "started_at")
    was_ended = _before(state, "ended_at")
    if was_attempt is not None and was_attempt != kernel.attempt:
        # placed again (a lost node): the old attempt ended when that was decided
        if was_started is not None and was_ended is None:
            slots = _before(state, "slots") or {}
            closes.append((kernel, was_attempt, slots, was_started, kernel.updated_at))
        was_started = was_ended = None
    if kernel.started_at is None:
        return False, closes
    ends = kernel.ended_at is not None and (was_started is None or was_ended is None)
    if ends:
        assert kernel.ended_at is not None
        closes.append((kernel, kernel.attempt, kernel.slots, kernel.started_at, kernel.ended_at))
    return was_started is None, closes


@event.listens_for(OrmSession, "after_flush")
def _follow_kernels(db: OrmSession, _flush: UOWTransaction) -> None:
    opened: list[Kernel] = []
    closes: list[_Close] = []
    for kernel in (*db.new, *db.dirty):
        if isinstance(kernel, Kernel):
            starts, closed = _moves(kernel)
            opened += [kernel] if starts else []
            closes += closed
    if not opened and not closes:
        return
    owners = _sessions(db, {k.session_id for k in opened} | {c[0].session_id for c in closes})
    connection = db.connection()
    if opened:
        connection.execute(_insert_ignoring_repeats(db), [_record(k, owners) for k in opened])
    if closes:
        connection.execute(
            _CLOSE_SQL.values(ended_at=bindparam("b_end", type_=USAGE.c.ended_at.type)),
            [{"b_kernel": k.id, "b_attempt": a, "b_end": end} for k, a, _, _, end in closes],
        )
        tally = db.info.setdefault(_CLOSED, [])
        for kernel, _, slots, started, ended in closes:
            project = owners[kernel.session_id][3] if kernel.session_id in owners else ""
            tally += [(project, s, v) for s, v in closed_amounts(slots, started, ended).items()]


def _sessions(db: OrmSession, ids: set[str]) -> dict[str, tuple[str, str | None, str, str]]:
    """Each session's owner, project id, resource group and project name ("" for none)."""
    rows = db.connection().execute(
        select(
            Session.id, Session.owner_id, Session.project_id, Session.resource_group, Project.name
        )
        .outerjoin(Project, Project.id == Session.project_id)
        .where(Session.id.in_(sorted(ids)))
    )
    return {sid: (owner, project, group, name or "") for sid, owner, project, group, name in rows}


def _record(kernel: Kernel, owners: dict[str, tuple[str, str | None, str, str]]) -> dict[str, Any]:
    owner, project, group, _ = owners[kernel.session_id]
    return {
        "kernel_id": kernel.id,
        "attempt": kernel.attempt,
        "session_id": kernel.session_id,
        "owner_id": owner,
        "project_id": project,
        "resource_group": group,
        "node_id": kernel.node_id,
        "slots": dict(kernel.slots),
        "started_at": kernel.started_at,
        "ended_at": None,  # closed by the update that follows, in the same flush
    }


def _insert_ignoring_repeats(db: OrmSession) -> Any:
    """An INSERT that leaves an attempt's record as it is if it exists (never twice)."""
    return insert_ignoring(db.get_bind().dialect.name, USAGE, ["kernel_id", "attempt"])


@event.listens_for(OrmSession, "after_commit")
def _count_closed(db: OrmSession) -> None:
    for project, slot, seconds in db.info.pop(_CLOSED, ()):
        USAGE_SECONDS.labels(project, slot).inc(seconds)


@event.listens_for(OrmSession, "after_rollback")
@event.listens_for(OrmSession, "after_begin")
def _forget_closed(db: OrmSession, *_: object) -> None:
    db.info.pop(_CLOSED, None)
