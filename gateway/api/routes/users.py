"""/v1/users: who am I, and (admins) users and their API keys."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from gateway.api.deps import Admin, CurrentUser, Users
from gateway.api.key_schemas import KeyInUse, KeyPublic, Me
from gateway.api.routes.keys import key_public
from gateway.api.schemas import ApiKeyCreate, ApiKeyCreated, UserCreate, UserPublic
from gateway.domain.keys import effective
from gateway.services.users import User

router = APIRouter(prefix="/v1/users", tags=["users"])


def _public(user: User) -> UserPublic:
    return UserPublic(id=user.id, name=user.name, role=user.role, created_at=user.created_at)


@router.get("/me", operation_id="users-me", response_model=Me)
async def me(principal: CurrentUser, users: Users) -> Me:
    """The caller, and what its key may do (the app proxy checks Bearer keys with this:
    opening a session's apps needs ``sessions``, calling a private endpoint
    ``endpoints``). Its role is what the key may act as: an admin's key without the
    ``admin`` scope answers ``user``."""
    user = await users.me(principal)
    key = KeyInUse(
        scopes=effective(principal.scopes, user.role), expires_at=principal.key_expires_at
    )
    role = user.role if principal.is_admin else "user"
    return Me(id=user.id, name=user.name, role=role, created_at=user.created_at, key=key)


@router.get("", operation_id="users-list", response_model=list[UserPublic])
async def list_users(_: Admin, users: Users) -> list[UserPublic]:
    return [_public(u) for u in await users.listing()]


@router.post(
    "", operation_id="users-create", status_code=status.HTTP_201_CREATED, response_model=UserPublic
)
async def create_user(body: UserCreate, _: Admin, users: Users) -> UserPublic:
    return _public(await users.create(body.name, body.role))


@router.post(
    "/{name}/keys",
    operation_id="users-create-key",
    status_code=status.HTTP_201_CREATED,
    response_model=ApiKeyCreated,
)
async def create_key(
    name: str, body: ApiKeyCreate, principal: CurrentUser, users: Users
) -> ApiKeyCreated:
    """A new API key for a user (admins: anyone; users: themselves). Shown once."""
    row, key = await users.create_key(principal, name, body.name)
    return ApiKeyCreated(id=row.id, user=name, name=row.name, prefix=row.prefix, key=key)


@router.get(
    "/{name}/keys",
    operation_id="users-list-keys",
    response_model=list[KeyPublic],
    deprecated=True,
)
async def list_keys(name: str, principal: CurrentUser, users: Users) -> list[KeyPublic]:
    """Deprecated: use ``GET /v1/keys?user=NAME``, which lists the same keys the same way
    (this one also lists revoked keys, newest first). Never the key itself."""
    keys, owner = await users.list_keys(principal, name)
    return [key_public(k, owner) for k in keys]


@router.delete(
    "/{name}/keys/{key_id}",
    operation_id="users-revoke-key",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def revoke_key(name: str, key_id: str, principal: CurrentUser, users: Users) -> Response:
    """Revoke a key at once on this gateway (other gateway processes within
    ``api_key_cache_s``). Revoking a revoked key changes nothing."""
    await users.revoke_key(principal, name, key_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
