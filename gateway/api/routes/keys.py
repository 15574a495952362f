"""/v1/keys: a user's own API keys (admins: anyone's, ``?user=``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status

from gateway.api.deps import CurrentUser, Users
from gateway.api.key_schemas import KeyCreate, KeyCreated, KeyPublic
from gateway.api.rules import USER_NAME_PATTERN
from gateway.services.keys import ApiKey, KeyRequest, User, effective_scopes

router = APIRouter(prefix="/v1/keys", tags=["keys"])

UserParam = Annotated[
    str | None,
    Query(pattern=USER_NAME_PATTERN, description="whose keys (admins); left out: the caller's"),
]


def key_public(key: ApiKey, user: User) -> KeyPublic:
    """*key* of *user* as listings show it (here and in ``/v1/users/{name}/keys``)."""
    return KeyPublic(
        id=key.id,
        user=user.name,
        name=key.name,
        prefix=key.prefix,
        scopes=effective_scopes(key, user.role),
        created_at=key.created_at,
        expires_at=key.expires_at,
        last_used_at=key.last_used_at,
        revoked_at=key.revoked_at,
    )


@router.post(
    "", operation_id="keys-create", status_code=status.HTTP_201_CREATED, response_model=KeyCreated
)
async def create_key(
    body: KeyCreate, principal: CurrentUser, users: Users, user: UserParam = None
) -> KeyCreated:
    """A new key, shown this once. Its scopes and expiry cannot exceed the calling key's."""
    asked = KeyRequest(
        body.name,
        None if body.scopes is None else list(body.scopes),
        body.expires_in,
        body.expires_at,
    )
    row, key, owner = await users.api_keys.create(principal, user, asked)
    return KeyCreated(**key_public(row, owner).model_dump(), key=key)


@router.get("", operation_id="keys-list", response_model=list[KeyPublic])
async def list_keys(
    principal: CurrentUser, users: Users, user: UserParam = None
) -> list[KeyPublic]:
    """A user's unrevoked keys (expired ones too), by name."""
    keys, owner = await users.api_keys.listing(principal, user)
    return [key_public(k, owner) for k in keys]


@router.delete(
    "/{name}",
    operation_id="keys-revoke",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def revoke_key(
    name: Annotated[str, Path(max_length=64)],
    principal: CurrentUser,
    users: Users,
    user: UserParam = None,
) -> Response:
    """Revoke a key by name: at once on this gateway, on others within
    ``api_key_cache_s``. A key revokes only keys within its own scopes."""
    await users.api_keys.revoke(principal, user, name=name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
