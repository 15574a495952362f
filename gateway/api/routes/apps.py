"""/v1/sessions/{id}/apps: the apps an interactive session serves, and links that open them."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter
from pydantic import BaseModel

from gateway.api.deps import CurrentUser, DbSession, State
from gateway.apps import open_app
from gateway.services.views import get_owned, published_apps

router = APIRouter(prefix="/v1/sessions", tags=["apps"])


class AppPublic(BaseModel):
    name: str
    protocol: str
    port: int
    strip_prefix: bool
    ready: bool  # the session runs and the app's port is published


class AppLinkPublic(BaseModel):
    app: str
    url: str
    expires_at: datetime


@router.get("/{session_id}/apps", operation_id="apps-list", response_model=list[AppPublic])
async def list_apps(session_id: str, principal: CurrentUser, db: DbSession) -> list[AppPublic]:
    session = await get_owned(db, principal, session_id)
    published = await published_apps(db, session.id)
    return [
        AppPublic(
            name=name,
            protocol=str(info.get("protocol", "http")),
            port=int(info.get("port", 0)),
            strip_prefix=bool(info.get("strip_prefix", False)),
            ready=session.status == "RUNNING" and name in published,
        )
        for name, info in sorted(session.apps.items())
    ]


@router.post("/{session_id}/apps/{app}", operation_id="apps-open", response_model=AppLinkPublic)
async def open_session_app(
    session_id: str, app: str, principal: CurrentUser, state: State, db: DbSession
) -> AppLinkPublic:
    """A one-time link (valid for a minute) that signs the caller in to the app."""
    session = await get_owned(db, principal, session_id)
    link = open_app(state.settings, principal, session, app)
    return AppLinkPublic(
        app=app, url=link.url, expires_at=datetime.fromtimestamp(link.expires_at, UTC)
    )
