"""FastAPI dependencies: the app state, a database session and the calling principal.

The principal comes from ``Authorization: Bearer jg_...`` or, without one, from the web
console's sign-in cookie (``gateway/console/cookies.py``: same principal as its key,
CSRF token and Origin checked on writes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal, authenticate_request, constant_time_equal
from gateway.console import cookies as console
from gateway.domain.errors import Forbidden, Unauthenticated
from gateway.state import AppState

__all__ = ["Admin", "CurrentUser", "DbSession", "NodeAuth", "State"]

_bearer = HTTPBearer(auto_error=False, description="an API key: jg_...")


async def _state(request: Request) -> AppState:  # async: sync deps run in a thread
    state: AppState = request.app.state.jobgate
    return state


State = Annotated[AppState, Depends(_state)]


async def _db(state: State) -> AsyncIterator[AsyncSession]:
    async with state.db() as db:
        yield db


DbSession = Annotated[AsyncSession, Depends(_db)]


async def _principal(
    request: Request,
    state: State,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is not None:
        return await authenticate_request(state.db, credentials.credentials, state.keys)
    cookie = request.cookies.get(console.COOKIE)
    if cookie:  # the web console: same principal as its key, CSRF checks on writes
        return await console.principal(
            state.pool,
            state.db,
            state.keys,
            cookie=cookie,
            method=request.method,
            csrf=request.headers.get(console.CSRF_HEADER),
            origin=request.headers.get("origin"),
            host=request.headers.get("host"),
        )
    raise Unauthenticated("send an API key: Authorization: Bearer jg_...")


CurrentUser = Annotated[Principal, Depends(_principal)]


async def _admin(principal: CurrentUser) -> Principal:
    if not principal.is_admin:
        raise Forbidden("this needs the admin role")
    return principal


Admin = Annotated[Principal, Depends(_admin)]


async def _node(
    state: State,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    token = state.settings.node_token.get_secret_value()
    if credentials is None or not token or not constant_time_equal(credentials.credentials, token):
        raise Unauthenticated("this endpoint is for worker nodes (node token)")


NodeAuth = Depends(_node)
