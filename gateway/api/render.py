"""Sessions as the API shows them: service results mapped to the response schemas."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import Response
from sqlalchemy.ext.asyncio import AsyncSession

from contract.cluster import cluster_hostname
from gateway.api.schemas import HistoryItem, KernelPublic, SessionPublic
from gateway.db.models import Kernel, Session
from gateway.services.sessions import Created
from gateway.services.views import SessionDetails, details, details_many
from gateway.state import AppState

__all__ = ["created", "public", "render", "render_many"]


def _kernel(k: Kernel) -> KernelPublic:
    cpus = k.cpuset.get("cpus") if k.cpuset else None
    return KernelPublic(
        id=k.id,
        index=k.cluster_idx,
        hostname=cluster_hostname(k.cluster_idx),
        status=k.status,
        node=k.node_id,
        slots=dict(k.slots),
        devices={slot: dict(devs) for slot, devs in k.devices.items()},
        cpuset=list(cpus) if cpus is not None else None,
        ports={name: int(port) for name, port in k.ports.items()},
        exit_code=k.exit_code,
        attempt=k.attempt or 1,  # (a transient row of a create has no defaults yet)
    )


def public(d: SessionDetails) -> SessionPublic:
    """The public view of one session from its details (no queries)."""
    s, ks = d.session, d.kernels
    view = SessionPublic(
        id=s.id,
        name=s.name,
        type=s.type,
        owner=d.owner,
        project=d.project,
        status=s.status,
        status_reason=s.status_reason,
        pending_reason=s.pending_reason or None if s.status == "PENDING" else None,
        exit_code=s.exit_code,
        image=s.image,
        command=list(s.command.get("argv", [])),
        env=dict(s.env),
        workdir=s.workdir,
        working_dir=s.working_dir,
        resources=dict(s.resources),
        resource_group=s.resource_group,
        priority=s.priority,
        cluster_size=s.cluster_size,
        cluster_mode=s.cluster_mode,
        stop_when=s.stop_when or "main-done",
        constraints=dict(s.constraints),
        depends_on=d.depends_on,
        starts_at=s.starts_at,
        node=next((k.node_id for k in ks if k.node_id), None),
        kernels=[_kernel(k) for k in ks],
        created_at=s.created_at,
        scheduled_at=s.scheduled_at,
        started_at=s.started_at,
        ended_at=s.ended_at,
        status_changed_at=s.status_changed_at,
        idle_timeout=s.idle_timeout_s,
        max_retries=s.max_retries,
        retries=s.retries or 0,
        preemptible=s.preemptible,
        preemptions=s.preemptions or 0,
        preempted_by=s.preempted_by,
        folders=list((s.folders or {}).get("items", [])),
        apps=sorted(s.apps),
        callback_url=s.callback_url,
        array_id=s.array_id,
        array_index=s.array_index,
        array_size=s.array_size,
    )
    if d.history is not None:
        view.history = [
            HistoryItem(
                from_status=h.from_status, to_status=h.to_status, reason=h.reason, at=h.created_at
            )
            for h in d.history
        ]
    return view


async def render_many(db: AsyncSession, sessions: Sequence[Session]) -> list[SessionPublic]:
    """Public views of several sessions with three queries, whatever their number."""
    return [public(d) for d in await details_many(db, sessions)]


async def render(db: AsyncSession, session: Session, *, history: bool = False) -> SessionPublic:
    return public(await details(db, session, history=history))


async def created(state: AppState, result: Created) -> Response:
    """The answer to a create (201, or 200 for an ``Idempotency-Key`` replay): the
    session's view, serialized once here. The route still declares ``SessionPublic``
    (the OpenAPI document); FastAPI passes a ready ``Response`` through without
    validating and encoding the model a second time, a good part of a create's cost."""
    if result.details is not None:
        view = public(result.details)
        view.callback_secret = result.session.callback_secret  # shown once, at create
    else:
        async with state.db() as db:
            view = await render(db, result.session)
    headers = {"Location": f"/v1/sessions/{result.session.id}"}
    if not result.created:
        headers["Idempotent-Replayed"] = "true"
    return Response(
        view.model_dump_json(),
        status_code=201 if result.created else 200,
        headers=headers,
        media_type="application/json",
    )
