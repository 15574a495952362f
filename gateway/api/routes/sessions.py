"""/v1/sessions: create, list, get, terminate."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from gateway.api.deps import CurrentUser, DbSession, IdempotencyKey, Images, Sessions, State
from gateway.api.render import created, render, render_many
from gateway.api.routes.images import ImagePublic, image_view
from gateway.api.rules import CURSOR_PATTERN, ID_PREFIX_PATTERN
from gateway.api.schemas import SessionCreate, SessionList, SessionPublic
from gateway.apps import last_activity
from gateway.domain.idle import idle_deadline, idle_timeout
from gateway.domain.requests import ListedType
from gateway.domain.status import SessionStatus
from gateway.images import IMAGE_NAME
from gateway.services.views import get_owned, list_page

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


@router.post(
    "",
    operation_id="sessions-create",
    status_code=status.HTTP_201_CREATED,
    response_model=SessionPublic,
    responses={200: {"model": SessionPublic, "description": "Idempotency-Key replay"}},
)
async def create_session(
    body: SessionCreate,
    principal: CurrentUser,
    state: State,
    sessions: Sessions,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Queue a session. A repeated ``Idempotency-Key`` returns the first session (200).

    A ``name`` is unique among the caller's live sessions: a taken one is a 409 problem
    whose ``session`` is the live session that has it. With ``count`` it queues an array
    of that many sessions, all or none, and answers with its first (index 0); the others
    are listed with ``?array=`` its ``array_id`` (docs/arrays.md)."""
    return await created(state, await sessions.create(principal, body, idempotency_key))


@router.get("", operation_id="sessions-list", response_model=SessionList)
async def list_sessions(
    principal: CurrentUser,
    state: State,
    db: DbSession,
    status_: Annotated[list[SessionStatus] | None, Query(alias="status")] = None,
    type_: Annotated[list[ListedType] | None, Query(alias="type")] = None,
    id_prefix: Annotated[str | None, Query(max_length=36, pattern=ID_PREFIX_PATTERN)] = None,
    name: Annotated[
        str | None,
        Query(
            max_length=128,
            description="the sessions with this name, newest first: the first is the one "
            "the name means (the live one, else the newest that ended)",
        ),
    ] = None,
    array: Annotated[
        str | None,
        Query(
            max_length=36,
            pattern=ID_PREFIX_PATTERN,
            description="the sessions of this array (its id: the array_id of its sessions)",
        ),
    ] = None,
    all_users: Annotated[bool, Query(alias="all", description="admins: every user's")] = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=512, pattern=CURSOR_PATTERN)] = None,
) -> SessionList:
    """Newest first; follow ``next_cursor`` for the next page."""
    rows, next_cursor = await list_page(
        db,
        principal,
        statuses=status_ or (),
        types=type_ or (),
        id_prefix=id_prefix,
        name=name,
        array=array,
        all_users=all_users,
        limit=min(limit, state.settings.page_size_max),
        cursor=cursor,
    )
    return SessionList(items=await render_many(db, rows), next_cursor=next_cursor)


@router.get("/{session_id}", operation_id="sessions-get", response_model=SessionPublic)
async def get_session(
    session_id: str, principal: CurrentUser, state: State, db: DbSession
) -> SessionPublic:
    """One session with its kernels, status history and (interactive) idle deadline."""
    session = await get_owned(db, principal, session_id)
    view = await render(db, session, history=True)
    if session.type == "interactive" and session.status == SessionStatus.RUNNING:
        view.last_activity_at = await last_activity(state.pool, session.id)
        timeout = idle_timeout(session.idle_timeout_s, state.settings.idle_timeout_s)
        view.idle_deadline = idle_deadline(session.started_at, view.last_activity_at, timeout)
    return view


class SessionCommit(BaseModel):
    # required, as the document says; checked after the session is found to be the
    # caller's, so that someone else's session is the 404 of one that does not exist
    model_config = ConfigDict(extra="forbid", json_schema_extra={"required": ["image"]})
    image: Annotated[
        str | None,
        WithJsonSchema({"type": "string", "maxLength": 255, "pattern": IMAGE_NAME.pattern}),
    ] = Field(default=None, description="name:tag of the new image (in the cluster registry)")


@router.post(
    "/{session_id}/commit",
    operation_id="sessions-commit",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ImagePublic,
)
async def commit_session(
    session_id: str, body: SessionCommit, principal: CurrentUser, images: Images
) -> ImagePublic:
    """Commit a running session's main container to a private image of its owner.

    The folder mounts and /home/work are not part of it. 202: the image is
    ``committing``; it is ``ready`` once pushed to the cluster registry (poll
    ``GET /v1/images``). Admins; owners where their user policy has ``allow_commit``."""
    return image_view(*await images.commit(principal, session_id, body.image))


@router.delete(
    "/{session_id}",
    operation_id="sessions-terminate",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SessionPublic,
)
async def terminate_session(
    session_id: str,
    principal: CurrentUser,
    sessions: Sessions,
    db: DbSession,
    force: Annotated[bool, Query(description="kill at once, no grace period")] = False,
) -> SessionPublic:
    """Cancel a pending session, or stop a running one (SIGTERM, grace, SIGKILL)."""
    session = await sessions.terminate(principal, session_id, force=force)
    return await render(db, session)
