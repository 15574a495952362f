"""/v1/triggers (inbound CI triggers, with an API key) and /v1/hooks/{id} (where CI
services deliver: no API key, the signature is the credential)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from gateway.api import audit
from gateway.api.deps import CurrentUser, Hooks
from gateway.domain.hooks import EVENT_NAME_PATTERN
from gateway.domain.requests import NAME_PATTERN, NO_NUL, Input
from gateway.services.hooks import HookDelivery, HookTrigger, TriggerSpec

triggers = APIRouter(prefix="/v1/triggers", tags=["triggers"])
hooks = APIRouter(prefix="/v1/hooks", tags=["triggers"])

Source = Literal["github", "gitlab", "standard"]


Branch = Annotated[str, Field(min_length=1, max_length=255, pattern=NO_NUL)]
EventName = Annotated[str, Field(max_length=64, json_schema_extra={"pattern": EVENT_NAME_PATTERN})]


class TriggerCreate(Input):
    name: str = Field(pattern=NAME_PATTERN)
    template: str = Field(pattern=NAME_PATTERN, description="one of your templates")
    source: Source
    # both checked by gateway.domain.hooks.check_filters, which says the rule in words
    events: list[EventName] = Field(
        default_factory=list,
        max_length=32,
        description="e.g. push, pull_request; none: all. GitHub's and GitLab's own event "
        "names (GitLab's merge requests are pull_request, tag pushes tag); a Standard "
        "Webhooks type is the sender's own",
    )
    branches: list[Branch] = Field(
        default_factory=list,
        max_length=32,
        description="globs: main, release/*; none: all. * within a segment, ** across /, "
        "? one character; nothing a branch name cannot hold",
    )


class TriggerPublic(BaseModel):
    id: str
    name: str
    template: str
    source: str
    events: list[str]
    branches: list[str]
    url: str
    refused: int
    created_at: datetime
    #: only in the create answer: configure it at the CI service now
    secret: str | None = None


class HookDeliveryPublic(BaseModel):
    delivery: str
    event: str
    ref: str
    verdict: str
    detail: str
    session_id: str | None
    at: datetime


class HookAnswerPublic(BaseModel):
    verdict: Literal["started", "duplicate", "filtered"]
    detail: str
    delivery: str
    session_id: str | None


def _view(request: Request, t: HookTrigger, template: str) -> TriggerPublic:
    base = str(request.base_url).rstrip("/")
    return TriggerPublic(
        id=t.id,
        name=t.name,
        template=template,
        source=t.source,
        events=list(t.events.get("items", [])),
        branches=list(t.branches.get("items", [])),
        url=f"{base}/v1/hooks/{t.id}",
        refused=t.refused,
        created_at=t.created_at,
    )


def _delivery(d: HookDelivery) -> HookDeliveryPublic:
    return HookDeliveryPublic(
        delivery=d.delivery_id,
        event=d.event,
        ref=d.ref,
        verdict=d.verdict,
        detail=d.detail,
        session_id=d.session_id,
        at=d.created_at,
    )


@triggers.post(
    "",
    operation_id="triggers-create",
    status_code=status.HTTP_201_CREATED,
    response_model=TriggerPublic,
)
async def create_trigger(
    body: TriggerCreate, principal: CurrentUser, service: Hooks, request: Request
) -> TriggerPublic:
    """A URL a CI service posts to; each verified delivery runs the template. The
    secret is in this answer only."""
    spec = TriggerSpec(body.name, body.template, body.source, body.events, body.branches)
    row = await service.create(principal, spec)
    view = _view(request, row, body.template)
    view.secret = row.secret
    return view


@triggers.get("", operation_id="triggers-list", response_model=list[TriggerPublic])
async def list_triggers(
    principal: CurrentUser, service: Hooks, request: Request
) -> list[TriggerPublic]:
    return [_view(request, t, name) for t, name in await service.mine(principal)]


@triggers.get("/{name}", operation_id="triggers-get", response_model=TriggerPublic)
async def get_trigger(
    name: str, principal: CurrentUser, service: Hooks, request: Request
) -> TriggerPublic:
    trigger, template = await service.get(principal, name)
    return _view(request, trigger, template)


@triggers.delete(
    "/{name}",
    operation_id="triggers-delete",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def delete_trigger(name: str, principal: CurrentUser, service: Hooks) -> Response:
    await service.delete(principal, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@triggers.get(
    "/{name}/deliveries",
    operation_id="triggers-deliveries",
    response_model=list[HookDeliveryPublic],
)
async def list_deliveries(
    name: str,
    principal: CurrentUser,
    service: Hooks,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[HookDeliveryPublic]:
    """Newest first: each verified delivery, its verdict and the session it started."""
    return [_delivery(d) for d in await service.deliveries(principal, name, limit)]


@hooks.post(
    "/{trigger_id}",
    operation_id="triggers-deliver",
    response_model=HookAnswerPublic,
    status_code=status.HTTP_202_ACCEPTED,
    responses={200: {"model": HookAnswerPublic, "description": "filtered, or seen before"}},
)
async def deliver(trigger_id: str, request: Request, service: Hooks) -> JSONResponse:
    """Where GitHub, GitLab or a Standard Webhooks sender delivers. Signed with the
    trigger's secret, or 401. A started session answers 202 at once (it is queued); a
    delivery id seen before, or one the filters pass over, answers 200."""
    body = await request.body()  # BodyLimit stops it past JOBGATE_MAX_HOOK_BYTES (413)
    answer = await service.receive(trigger_id, request.headers, body)
    audit.note_credential(request, "trigger signature")  # checked: else a 401 above
    view = HookAnswerPublic(
        verdict=answer.verdict,
        detail=answer.detail,
        delivery=answer.delivery,
        session_id=answer.session_id,
    )
    code = status.HTTP_202_ACCEPTED if answer.verdict == "started" else status.HTTP_200_OK
    return JSONResponse(view.model_dump(), status_code=code)


router = APIRouter()  # what app.py includes: both prefixes
router.include_router(triggers)
router.include_router(hooks)
