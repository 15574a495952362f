"""/v1/secrets: user secrets (docs/secrets.md). A value goes in (create, rotate) and
never comes out: every answer names the secret, its owner and dates only."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Response, status
from pydantic import BaseModel, Field

from contract.secrets import SECRET_NAME_PATTERN
from gateway.api.deps import CurrentUser, Secrets
from gateway.domain.errors import Invalid
from gateway.domain.masking import MIN_MASKED
from gateway.domain.requests import NAME_PATTERN, Input
from gateway.services.secrets import MAX_VALUE_CHARS, SecretView

router = APIRouter(prefix="/v1/secrets", tags=["secrets"])

SecretName = Annotated[str, Field(pattern=SECRET_NAME_PATTERN)]
ProjectName = Annotated[str | None, Query(pattern=NAME_PATTERN, description="a project's")]


class SecretCreate(Input):
    name: str = Field(pattern=SECRET_NAME_PATTERN, description="also the default variable name")
    value: str = Field(
        min_length=MIN_MASKED,
        max_length=MAX_VALUE_CHARS,
        repr=False,
        description="UTF-8 text; never shown again",
    )
    project: str | None = Field(
        default=None, pattern=NAME_PATTERN, description="owned by this project (you: a member)"
    )


class SecretRotate(Input):
    value: str = Field(min_length=MIN_MASKED, max_length=MAX_VALUE_CHARS, repr=False)


def _utf8(value: str) -> bytes:
    try:
        return value.encode()
    except UnicodeEncodeError:  # a lone surrogate (JSON allows "\ud800")
        raise Invalid("a secret's value must be UTF-8 text", field="value") from None


class SecretPublic(BaseModel):
    name: str
    owner: str = Field(description="user NAME | project NAME")
    project: str | None
    created_at: datetime
    updated_at: datetime


def _public(view: SecretView) -> SecretPublic:
    return SecretPublic(
        name=view.name,
        owner=view.owner,
        project=view.project,
        created_at=view.created_at,
        updated_at=view.updated_at,
    )


@router.post(
    "",
    operation_id="secrets-create",
    response_model=SecretPublic,
    status_code=status.HTTP_201_CREATED,
)
async def create_secret(
    body: SecretCreate, principal: CurrentUser, secrets: Secrets
) -> SecretPublic:
    """Seal a new secret of yours (or of a project you are in); 409 if the name is taken."""
    view = await secrets.create(principal, body.name, _utf8(body.value), body.project)
    return _public(view)


@router.get("", operation_id="secrets-list", response_model=list[SecretPublic])
async def list_secrets(principal: CurrentUser, secrets: Secrets) -> list[SecretPublic]:
    """Yours, then your projects': names and dates, never values."""
    return [_public(v) for v in await secrets.listing(principal)]


@router.put("/{name}", operation_id="secrets-rotate", response_model=SecretPublic)
async def rotate_secret(
    name: SecretName,
    body: SecretRotate,
    principal: CurrentUser,
    secrets: Secrets,
    project: ProjectName = None,
) -> SecretPublic:
    """A new value (sessions that start from now on get it)."""
    return _public(await secrets.rotate(principal, name, _utf8(body.value), project))


@router.delete("/{name}", operation_id="secrets-delete", status_code=status.HTTP_204_NO_CONTENT)
async def delete_secret(
    name: SecretName, principal: CurrentUser, secrets: Secrets, project: ProjectName = None
) -> Response:
    await secrets.delete(principal, name, project)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
