"""/v1/users: who am I, and (admins) users and their API keys."""

from __future__ import annotations

from fastapi import APIRouter, status
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from gateway.api.deps import Admin, CurrentUser, DbSession
from gateway.api.schemas import ApiKeyCreate, ApiKeyCreated, UserCreate, UserPublic
from gateway.auth import issue_key
from gateway.db.models import User
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
