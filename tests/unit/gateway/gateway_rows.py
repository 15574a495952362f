"""Rows for the gateway's unit tests, in a real (SQLite) database made from the ORM metadata.

The gateway's writers decide inside a transaction and put what Redis should get into an
:class:`~gateway.outbox.Outbox`; these tests read that outbox instead of Redis.
``Rows`` builds the rows a case starts from and reads them back.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from arq.connections import ArqRedis

from gateway.db.engine import SessionFactory
from gateway.db.models import Base, Kernel, Node, Session, StatusHistory, User
from gateway.domain.status import KernelStatus, SessionStatus
from plugins.resources import ResourceSlots

M = TypeVar("M", bound=Base)

#: for constructors that take a pool the code under test never touches (it only fills
#: an outbox); any use of it fails loudly
NO_REDIS = cast(ArqRedis, object())
ONE_CPU = ResourceSlots.parse({"cpu": "1", "mem": "1g"}).to_json()


def ago(seconds: float) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds)


class Rows:
    """Rows for one case: a user, nodes, sessions with their kernels."""

    def __init__(self, db: SessionFactory) -> None:
        self.db = db
        self.user = "u1"

    async def add(self, *rows: Base) -> None:
        async with self.db() as db, db.begin():
            for row in rows:  # in order: the models have no relationships to sort them by
                db.add(row)
                await db.flush()

    async def node(
        self, node_id: str = "n1", *, kernels: int = 0, last_seen: datetime | None = None
    ) -> None:
        """A node with 8 cpus, *kernels* of them (one each) already taken."""
        taken = ResourceSlots.parse({"cpu": kernels, "mem": f"{kernels}g"}) if kernels else None
        await self.add(
            Node(
                id=node_id,
                hostname=node_id,
                address="127.0.0.1",
                queue=f"jobgate:node:{node_id}",
                runtime="sim",
                capacity=ResourceSlots.parse({"cpu": "8", "mem": "16g"}).to_json(),
                occupied=taken.to_json() if taken else {},
                last_seen_at=last_seen or datetime.now(UTC),
            )
        )

    async def session(
        self,
        status: SessionStatus,
        kernels: list[tuple[KernelStatus, str | None]],
        *,
        session_id: str = "s1",
        type: str = "batch",
        updated: datetime | None = None,
        **columns: Any,
    ) -> list[str]:
        """A session and its kernels (status, node); placed kernels hold one cpu there.
        Returns the kernel ids (``{session_id}-k{index}``)."""
        if await self.get(User, self.user) is None:
            await self.add(User(id=self.user, name="alice"))
        ended = {KernelStatus.EXITED, KernelStatus.FAILED, KernelStatus.CANCELLED}
        ids = [f"{session_id}-k{i}" for i in range(len(kernels))]
        rows: list[Base] = [
            Session(
                id=session_id,
                owner_id=self.user,
                type=type,
                status=status,
                cluster_size=len(kernels),
                resources=ONE_CPU,
                **columns,
            )
        ]
        for kernel_id, (kstatus, node) in zip(ids, kernels, strict=True):
            rows.append(
                Kernel(
                    id=kernel_id,
                    session_id=session_id,
                    cluster_idx=int(kernel_id.rsplit("k", 1)[1]),
                    status=kstatus,
                    node_id=node,
                    slots=ONE_CPU if node else {},
                    ended_at=datetime.now(UTC) if kstatus in ended else None,
                    released=kstatus in ended,
                    updated_at=updated or datetime.now(UTC),
                )
            )
        await self.add(*rows)
        return ids

    async def get(self, model: type[M], key: Any) -> M | None:
        async with self.db() as db:
            return await db.get(model, key)

    async def one(self, model: type[M], key: Any) -> M:
        row = await self.get(model, key)
        assert row is not None, f"no {model.__name__} {key}"
        return row

    async def cpus_taken(self, node_id: str = "n1") -> str:
        node = await self.one(Node, node_id)
        return str(ResourceSlots.from_json(node.occupied).get("cpu", 0))

    async def history(self, session_id: str = "s1") -> list[str]:
        async with self.db() as db:
            rows = await db.execute(
                StatusHistory.__table__.select()
                .where(StatusHistory.session_id == session_id)
                .order_by(StatusHistory.id)
            )
            return [row.to_status for row in rows]

    async def history_entries(self, session_id: str = "s1") -> list[tuple[str, str, str]]:
        """(from, to, reason) of each history entry, in order."""
        async with self.db() as db:
            rows = await db.execute(
                StatusHistory.__table__.select()
                .where(StatusHistory.session_id == session_id)
                .order_by(StatusHistory.id)
            )
            return [(row.from_status, row.to_status, row.reason) for row in rows]
