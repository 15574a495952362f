"""/v1/endpoints: inference endpoints, their scale, revisions and tokens.

An endpoint is addressed by its name (unique: it is in the URL). Another user's endpoint
is a 404, exactly as one that does not exist.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from contract.endpoints import Probe, endpoint_url
from gateway.api.deps import CurrentUser, Endpoints, IdempotencyKey, State
from gateway.api.endpoint_schemas import (
    EndpointEventPublic,
    EndpointPublic,
    EndpointSummary,
    ReplicaPublic,
    RevisionPublic,
    SecretTarget,
    TokenCreated,
    TokenPublic,
)
from gateway.config import GatewaySettings
from gateway.domain.autoscale import AutoscaleSettings, zero_after_s
from gateway.domain.endpoints import (
    EndpointCreate,
    EndpointRollback,
    EndpointScale,
    EndpointUpdate,
    TokenCreate,
)
from gateway.domain.rollout import RolloutSettings
from gateway.services.endpoints import (
    Endpoint,
    EndpointDetails,
    EndpointRevision,
    EndpointToken,
)

router = APIRouter(prefix="/v1/endpoints", tags=["endpoints"])


def _url(settings: GatewaySettings, name: str) -> str:
    return endpoint_url(settings.proxy_public_url, name, base_domain=settings.proxy_base_domain)


def _revision(r: EndpointRevision) -> RevisionPublic:
    return RevisionPublic(
        number=r.number,
        image=r.image,
        command=list(r.command.get("argv", [])),
        port=r.port,
        resources=dict(r.resources),
        env=dict(r.env),
        working_dir=r.working_dir,
        resource_group=r.resource_group,
        probe=Probe.model_validate(r.probe),
        rollout=RolloutSettings.model_validate(r.rollout),
        folders=list(r.command.get("folders", [])),
        secrets=[
            SecretTarget(name=s["name"], env=s["env"], path=s["path"])
            for s in r.command.get("secrets", [])
        ],
        state=r.state,
        reason=r.reason,
        created_by=r.created_by,
        created_at=r.created_at,
    )


def _summary(settings: GatewaySettings, e: Endpoint, owner: str, ready: int) -> EndpointSummary:
    autoscale = AutoscaleSettings.model_validate(e.autoscale)
    return EndpointSummary(
        id=e.id,
        name=e.name,
        owner=owner,
        url=_url(settings, e.name),
        public=e.public,
        status=e.status,
        status_reason=e.status_reason,
        revision=e.revision,
        desired_replicas=e.desired_replicas,
        ready_replicas=ready,
        autoscale=autoscale,
        to_zero_after_s=zero_after_s(autoscale),
        created_at=e.created_at,
        updated_at=e.updated_at,
    )


def _details(settings: GatewaySettings, d: EndpointDetails) -> EndpointPublic:
    replicas = [
        ReplicaPublic(
            index=r.session.replica_index or 0,
            session_id=r.session.id,
            revision=r.session.endpoint_revision or 0,
            state=r.session.replica_state or "starting",
            session_status=r.session.status,
            node=r.node,
            ready=bool(r.health and r.health.ready and r.session.status == "RUNNING"),
            health="" if r.health is None else r.health.reason,
            in_flight=r.in_flight,
            rps=round(r.rps, 3),
            reason=r.session.pending_reason
            if r.session.status == "PENDING"
            else r.session.status_reason,
        )
        for r in d.replicas
    ]
    live = [r for r in replicas if r.state in ("starting", "serving")]
    summary = _summary(settings, d.endpoint, d.owner, sum(1 for r in live if r.ready))
    return EndpointPublic(
        **summary.model_dump(),
        stable_revision=d.endpoint.stable_revision,
        current=_revision(d.revision),
        replicas=replicas,
        in_flight=d.load.in_flight,
        queued=d.load.queued,
        rps=round(d.load.rps, 3),
        events=[
            EndpointEventPublic(at=e.created_at, kind=e.kind, message=e.message, inputs=e.inputs)
            for e in d.events
        ],
        revisions=[_revision(r) for r in d.revisions],
    )


def _token(t: EndpointToken) -> TokenPublic:
    return TokenPublic(
        id=t.id,
        name=t.name,
        prefix=t.prefix,
        created_at=t.created_at,
        expires_at=t.expires_at,
        revoked_at=t.revoked_at,
    )


@router.post(
    "",
    operation_id="endpoints-create",
    status_code=status.HTTP_201_CREATED,
    response_model=EndpointPublic,
    responses={200: {"model": EndpointPublic, "description": "Idempotency-Key replay"}},
)
async def create_endpoint(
    body: EndpointCreate,
    principal: CurrentUser,
    state: State,
    endpoints: Endpoints,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> EndpointPublic:
    """Create an endpoint (revision 1); the controller starts its replicas.

    A repeated ``Idempotency-Key`` returns the first endpoint (200)."""
    endpoint, created = await endpoints.create(principal, body, idempotency_key)
    if not created:
        response.status_code = status.HTTP_200_OK
        response.headers["Idempotent-Replayed"] = "true"
    response.headers["Location"] = f"/v1/endpoints/{endpoint.name}"
    return _details(state.settings, await endpoints.details(principal, endpoint.name))


@router.get("", operation_id="endpoints-list", response_model=list[EndpointSummary])
async def list_endpoints(
    principal: CurrentUser,
    state: State,
    endpoints: Endpoints,
    all_users: Annotated[bool, Query(alias="all", description="admins: every user's")] = False,
) -> list[EndpointSummary]:
    out = []
    for e in await endpoints.list_endpoints(principal, all_users=all_users):
        d = await endpoints.details(principal, e.name)
        out.append(_summary(state.settings, e, d.owner, _details(state.settings, d).ready_replicas))
    return out


@router.get("/{name}", operation_id="endpoints-get", response_model=EndpointPublic)
async def get_endpoint(
    name: str, principal: CurrentUser, state: State, endpoints: Endpoints
) -> EndpointPublic:
    """Status, URL, revision, desired vs ready, each replica, recent decisions."""
    return _details(state.settings, await endpoints.details(principal, name))


@router.post("/{name}/scale", operation_id="endpoints-scale", response_model=EndpointPublic)
async def scale_endpoint(
    name: str, body: EndpointScale, principal: CurrentUser, state: State, endpoints: Endpoints
) -> EndpointPublic:
    """A fixed replica count, or min/max (and a target) for autoscaling."""
    await endpoints.scale(principal, name, body)
    return _details(state.settings, await endpoints.details(principal, name))


@router.post("/{name}/revisions", operation_id="endpoints-update", response_model=EndpointPublic)
async def update_endpoint(
    name: str, body: EndpointUpdate, principal: CurrentUser, state: State, endpoints: Endpoints
) -> EndpointPublic:
    """A new revision: the current one with the fields given changed, rolled out replica
    by replica (rolled back if it never gets ready)."""
    await endpoints.update(principal, name, body)
    return _details(state.settings, await endpoints.details(principal, name))


@router.post("/{name}/rollback", operation_id="endpoints-rollback", response_model=EndpointPublic)
async def rollback_endpoint(
    name: str, body: EndpointRollback, principal: CurrentUser, state: State, endpoints: Endpoints
) -> EndpointPublic:
    """Roll out an earlier revision again (default: the last one that was ready)."""
    await endpoints.rollback(principal, name, body.to)
    return _details(state.settings, await endpoints.details(principal, name))


@router.delete(
    "/{name}",
    operation_id="endpoints-delete",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=EndpointSummary,
)
async def delete_endpoint(
    name: str, principal: CurrentUser, state: State, endpoints: Endpoints
) -> EndpointSummary:
    """Stop taking requests and stop every replica."""
    endpoint = await endpoints.delete(principal, name)
    return _summary(state.settings, endpoint, principal.name, 0)


@router.post(
    "/{name}/tokens",
    operation_id="endpoints-tokens-create",
    status_code=status.HTTP_201_CREATED,
    response_model=TokenCreated,
)
async def create_token(
    name: str, body: TokenCreate, principal: CurrentUser, endpoints: Endpoints
) -> TokenCreated:
    """A bearer token for calling the endpoint; the answer is the only time it is shown."""
    issued = await endpoints.create_token(principal, name, body)
    return TokenCreated(**_token(issued.row).model_dump(), token=issued.token)


@router.get(
    "/{name}/tokens", operation_id="endpoints-tokens-list", response_model=list[TokenPublic]
)
async def list_tokens(name: str, principal: CurrentUser, endpoints: Endpoints) -> list[TokenPublic]:
    return [_token(t) for t in await endpoints.list_tokens(principal, name)]


@router.delete(
    "/{name}/tokens/{token_id}",
    operation_id="endpoints-tokens-revoke",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def revoke_token(
    name: str, token_id: str, principal: CurrentUser, endpoints: Endpoints
) -> Response:
    await endpoints.revoke_token(principal, name, token_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
