"""Endpoint writers that lock the endpoint's row (scale here; update, rollback and delete
the same way) run their whole transaction again when PostgreSQL makes them a deadlock's
victim, and poke the controller once, after the attempt that committed. Any other
database error is the caller's at once."""

from __future__ import annotations

from typing import cast

import pytest
from arq.connections import ArqRedis
from gateway_rows import Rows
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from contract.keys import ENDPOINT_WAKE_CHANNEL
from gateway.auth import Principal
from gateway.db.engine import SessionFactory
from gateway.db.models import Endpoint, EndpointEvent, User
from gateway.domain.endpoints import EndpointScale
from gateway.services.endpoints import EndpointService
from gateway.services.sessions import SessionService

ALICE = Principal(user_id="u1", name="alice", role="user")


class _DriverError(Exception):
    def __init__(self, state: str) -> None:
        super().__init__(f"driver error {state}")
        self.sqlstate = state


class _Pool:
    """The one Redis call these writers make after their commit."""

    def __init__(self) -> None:
        self.published: list[tuple[str, str]] = []

    async def publish(self, channel: str, message: str) -> None:
        self.published.append((channel, message))


async def _service(
    db: SessionFactory, rows: Rows, failures: list[str], monkeypatch: pytest.MonkeyPatch
) -> EndpointService:
    """An endpoint "web" (1 replica) of alice's, and a service whose row lock fails
    with each SQLSTATE in *failures* (in turn) before it locks for real."""
    await rows.add(
        User(id="u1", name="alice"),
        Endpoint(id="e1", name="web", owner_id="u1", autoscale={}, desired_replicas=1),
    )
    pool = _Pool()
    service = EndpointService(db, cast(ArqRedis, pool), cast(SessionService, object()))
    locked = service._locked

    async def lock(session: AsyncSession, principal: Principal, name: str) -> Endpoint:
        if failures:
            raise DBAPIError("SELECT ... FOR KEY SHARE", {}, _DriverError(failures.pop(0)))
        return await locked(session, principal, name)

    monkeypatch.setattr(service, "_locked", lock)
    return service


def _published(service: EndpointService) -> list[tuple[str, str]]:
    return cast(_Pool, service.pool).published


async def _event_kinds(rows: Rows) -> list[str]:
    async with rows.db() as db:
        found = await db.execute(EndpointEvent.__table__.select())
        return [str(row.kind) for row in found]


async def test_scale_that_loses_a_deadlock_runs_again_and_pokes_once(
    db: SessionFactory, rows: Rows, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = ["40P01"]
    service = await _service(db, rows, failures, monkeypatch)

    endpoint = await service.scale(ALICE, "web", EndpointScale(replicas=3))

    assert failures == []  # the deadlocked attempt ran, then the one that committed
    assert (endpoint.autoscale["min_replicas"], endpoint.autoscale["max_replicas"]) == (3, 3)
    stored = await rows.one(Endpoint, "e1")
    assert stored.autoscale["min_replicas"] == 3
    assert await _event_kinds(rows) == ["scale"]
    assert _published(service) == [(ENDPOINT_WAKE_CHANNEL, "e1")]


async def test_scale_does_not_retry_other_database_errors(
    db: SessionFactory, rows: Rows, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = ["23505", "23505"]  # a unique violation: trying again would not help
    service = await _service(db, rows, failures, monkeypatch)

    with pytest.raises(DBAPIError):
        await service.scale(ALICE, "web", EndpointScale(replicas=3))

    assert failures == ["23505"]  # one attempt only
    assert (await rows.one(Endpoint, "e1")).autoscale == {}
    assert await _event_kinds(rows) == []
    assert _published(service) == []
