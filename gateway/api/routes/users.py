"""/v1/users: who am I, and (admins) users and their API keys."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from gateway.api.deps import Admin, CurrentUser, DbSession, State
from gateway.api.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyPublic, UserCreate, UserPublic
from gateway.auth import Principal, issue_key
from gateway.db.models import ApiKey, User, utcnow
from gateway.domain.errors import Conflict, Forbidden, NotFound

router = APIRouter(prefix="/v1/users", tags=["users"])


def _public(user: User) -> UserPublic:
    return UserPublic(id=user.id, name=user.name, role=user.role, created_at=user.created_at)


@router.get("/me", operation_id="users-me", response_model=UserPublic)
async def me(principal: CurrentUser, db: DbSession) -> UserPublic:
    """The caller (the app proxy checks Bearer keys with this)."""
    user = await db.get(User, principal.user_id)
    if user is None:
        raise NotFound("the key's user no longer exists")
    return _public(user)


@router.get("", operation_id="users-list", response_model=list[UserPublic])
async def list_users(_: Admin, db: DbSession) -> list[UserPublic]:
    return [_public(u) for u in (await db.execute(select(User).order_by(User.name))).scalars()]


@router.post(
    "", operation_id="users-create", status_code=status.HTTP_201_CREATED, response_model=UserPublic
)
async def create_user(body: UserCreate, _: Admin, db: DbSession) -> UserPublic:
    user = User(name=body.name, role=body.role)
    try:
        async with db.begin():
            db.add(user)
    except IntegrityError:
        raise Conflict(f"a user named {body.name!r} exists") from None
    return _public(user)


@router.post(
    "/{name}/keys",
    operation_id="users-create-key",
    status_code=status.HTTP_201_CREATED,
    response_model=ApiKeyCreated,
)
async def create_key(
    name: str, body: ApiKeyCreate, principal: CurrentUser, db: DbSession
) -> ApiKeyCreated:
    """A new API key for a user (admins: anyone; users: themselves). Shown once."""
    if not principal.is_admin and name != principal.name:
        raise Forbidden("users may only create keys for themselves")
    async with db.begin():
        user = (await db.execute(select(User).where(User.name == name))).scalar_one_or_none()
        if user is None:
            raise NotFound(f"no user {name!r}")
        row, key = await issue_key(db, user, body.name)
    return ApiKeyCreated(id=row.id, user=user.name, name=row.name, prefix=row.prefix, key=key)


async def _key_owner(db: DbSession, principal: Principal, name: str) -> User:
    """The user whose keys are asked for: admins may name anyone, users only themselves."""
    if not principal.is_admin and name != principal.name:
        raise Forbidden("users may only manage their own keys")
    user = (await db.execute(select(User).where(User.name == name))).scalar_one_or_none()
    if user is None:
        raise NotFound(f"no user {name!r}")
    return user


@router.get("/{name}/keys", operation_id="users-list-keys", response_model=list[ApiKeyPublic])
async def list_keys(name: str, principal: CurrentUser, db: DbSession) -> list[ApiKeyPublic]:
    """A user's keys, newest first: name, prefix and whether revoked (never the key)."""
    user = await _key_owner(db, principal, name)
    rows = await db.execute(
        select(ApiKey).where(ApiKey.user_id == user.id).order_by(ApiKey.created_at.desc())
    )
    return [
        ApiKeyPublic(
            id=k.id, name=k.name, prefix=k.prefix, created_at=k.created_at, revoked_at=k.revoked_at
        )
        for k in rows.scalars()
    ]


@router.delete(
    "/{name}/keys/{key_id}",
    operation_id="users-revoke-key",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def revoke_key(
    name: str, key_id: str, principal: CurrentUser, db: DbSession, state: State
) -> Response:
    """Revoke a key at once on this gateway (other gateway processes within
    ``api_key_cache_s``). Revoking a revoked key changes nothing."""
    async with db.begin():
        user = await _key_owner(db, principal, name)
        key = await db.get(ApiKey, key_id)
        if key is None or key.user_id != user.id:
            raise NotFound(f"no key {key_id} of user {name!r}")
        if key.revoked_at is None:
            key.revoked_at = utcnow()
        digest = key.key_hash
    state.keys.forget(digest)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
