"""/v1/templates: job templates (parameterized sessions) and their runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Response, status
from pydantic import BaseModel

from gateway.api.deps import CurrentUser, IdempotencyKey, State, Templates
from gateway.api.render import created
from gateway.api.schemas import SessionPublic
from gateway.domain.templates import TemplateCreate, TemplateParam, TemplateRun
from gateway.services.templates import JobTemplate

router = APIRouter(prefix="/v1/templates", tags=["templates"])


class TemplatePublic(BaseModel):
    id: str
    name: str
    description: str
    params: list[TemplateParam]
    session: dict[str, Any]
    created_at: datetime


def _view(t: JobTemplate) -> TemplatePublic:
    return TemplatePublic(
        id=t.id,
        name=t.name,
        description=t.description,
        params=[TemplateParam(**p) for p in t.params.get("items", [])],
        session=dict(t.spec),
        created_at=t.created_at,
    )


@router.post(
    "",
    operation_id="templates-create",
    status_code=status.HTTP_201_CREATED,
    response_model=TemplatePublic,
)
async def create_template(
    body: TemplateCreate, principal: CurrentUser, templates: Templates
) -> TemplatePublic:
    """A session request with parameters; each run gives them as ``JOBGATE_PARAM_<NAME>``."""
    return _view(await templates.create(principal, body))


@router.get("", operation_id="templates-list", response_model=list[TemplatePublic])
async def list_templates(principal: CurrentUser, templates: Templates) -> list[TemplatePublic]:
    return [_view(t) for t in await templates.mine(principal)]


@router.get("/{name}", operation_id="templates-get", response_model=TemplatePublic)
async def get_template(name: str, principal: CurrentUser, templates: Templates) -> TemplatePublic:
    return _view(await templates.get(principal, name))


@router.delete(
    "/{name}",
    operation_id="templates-delete",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def delete_template(name: str, principal: CurrentUser, templates: Templates) -> Response:
    """The template and its triggers; sessions it started stay."""
    await templates.delete(principal, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{name}/run",
    operation_id="templates-run",
    status_code=status.HTTP_201_CREATED,
    response_model=SessionPublic,
    responses={200: {"model": SessionPublic, "description": "Idempotency-Key replay"}},
)
async def run_template(
    name: str,
    body: TemplateRun,
    principal: CurrentUser,
    state: State,
    templates: Templates,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Submit the template's session with these parameters (``JOBGATE_PARAM_<NAME>``
    in its environment); unknown or missing parameters are a 422 naming them."""
    template = await templates.get(principal, name)
    return await created(state, await templates.run(principal, template, body, idempotency_key))
