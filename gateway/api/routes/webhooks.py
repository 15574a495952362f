"""/v1/webhooks: outbound webhooks (signed, retried) and their deliveries."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from pydantic import BaseModel, Field

from gateway.api.deps import CurrentUser, Webhooks
from gateway.domain.requests import NAME_PATTERN, Input
from gateway.domain.webhooks import EVENT_TYPES, URL_PATTERN
from gateway.services.webhooks import DeliveryView, Webhook

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])


class WebhookCreate(Input):
    url: str = Field(
        max_length=2048,
        json_schema_extra={"pattern": URL_PATTERN},
        description="http(s) URL; non-public addresses refused",
    )
    events: list[str] = Field(
        min_length=1,
        max_length=len(EVENT_TYPES),
        json_schema_extra={"items": {"type": "string", "enum": list(EVENT_TYPES)}},
        description=", ".join(EVENT_TYPES),
    )
    project: str | None = Field(
        default=None, pattern=NAME_PATTERN, description="every session of this project"
    )


class WebhookPublic(BaseModel):
    id: str
    url: str
    events: list[str]
    project: str | None
    disabled_reason: str | None
    created_at: datetime
    #: only when created or rotated: the whsec_ secret deliveries are signed with
    secret: str | None = None


class DeliveryPublic(BaseModel):
    id: str
    event_id: str = Field(description="the webhook-id header: the same on every attempt")
    type: str
    status: str  # pending | succeeded | failed | cancelled
    attempts: int
    last_status_code: int | None
    last_error: str
    next_attempt_at: datetime | None
    created_at: datetime
    log: list[dict[str, Any]]


def _view(w: Webhook, project: str | None) -> WebhookPublic:
    return WebhookPublic(
        id=w.id,
        url=w.url,
        events=list(w.events.get("items", [])),
        project=project,
        disabled_reason=w.disabled_reason,
        created_at=w.created_at,
    )


def _delivery(v: DeliveryView) -> DeliveryPublic:
    d = v.delivery
    return DeliveryPublic(
        id=d.id,
        event_id=d.event_id,
        type=v.event_type,
        status=d.status,
        attempts=d.attempts,
        last_status_code=d.last_status_code,
        last_error=d.last_error,
        next_attempt_at=d.next_attempt_at if d.status == "pending" else None,
        created_at=d.created_at,
        log=list(d.log.get("items", [])),
    )


@router.post(
    "",
    operation_id="webhooks-create",
    status_code=status.HTTP_201_CREATED,
    response_model=WebhookPublic,
)
async def create_webhook(
    body: WebhookCreate, principal: CurrentUser, webhooks: Webhooks
) -> WebhookPublic:
    """Events of your sessions (or of a project's) POSTed to the URL, signed per
    Standard Webhooks v1 with the secret in this answer."""
    hook, project = await webhooks.create(principal, body.url, body.events, body.project)
    view = _view(hook, project)
    view.secret = hook.secret
    return view


@router.get("", operation_id="webhooks-list", response_model=list[WebhookPublic])
async def list_webhooks(principal: CurrentUser, webhooks: Webhooks) -> list[WebhookPublic]:
    return [_view(w, p) for w, p in await webhooks.mine(principal)]


@router.get("/{webhook_id}", operation_id="webhooks-get", response_model=WebhookPublic)
async def get_webhook(webhook_id: str, principal: CurrentUser, webhooks: Webhooks) -> WebhookPublic:
    return _view(*await webhooks.get(principal, webhook_id))


@router.delete(
    "/{webhook_id}",
    operation_id="webhooks-delete",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def delete_webhook(webhook_id: str, principal: CurrentUser, webhooks: Webhooks) -> Response:
    await webhooks.delete(principal, webhook_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{webhook_id}/rotate", operation_id="webhooks-rotate", response_model=WebhookPublic)
async def rotate_secret(
    webhook_id: str, principal: CurrentUser, webhooks: Webhooks
) -> WebhookPublic:
    """A new secret (in this answer); deliveries carry both signatures for a day."""
    hook = await webhooks.rotate(principal, webhook_id)
    _, project = await webhooks.get(principal, webhook_id)
    view = _view(hook, project)
    view.secret = hook.secret
    return view


@router.get(
    "/{webhook_id}/deliveries",
    operation_id="webhooks-deliveries",
    response_model=list[DeliveryPublic],
)
async def list_deliveries(
    webhook_id: str,
    principal: CurrentUser,
    webhooks: Webhooks,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[DeliveryPublic]:
    """Newest first, each with its attempts' status codes."""
    return [_delivery(v) for v in await webhooks.deliveries(principal, webhook_id, limit)]


@router.post(
    "/deliveries/{delivery_id}/redeliver",
    operation_id="webhooks-redeliver",
    response_model=DeliveryPublic,
)
async def redeliver(delivery_id: str, principal: CurrentUser, webhooks: Webhooks) -> DeliveryPublic:
    """Send it again now (same webhook-id, a fresh retry schedule)."""
    return _delivery(await webhooks.redeliver(principal, delivery_id))
