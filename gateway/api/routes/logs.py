"""/v1/sessions/{id}/logs: whole, as text or JSON, or followed live as Server-Sent Events."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse, StreamingResponse

from gateway.api.deps import CurrentUser, Logs

router = APIRouter(prefix="/v1/sessions", tags=["logs"])


@router.get(
    "/{session_id}/logs",
    operation_id="logs-get",
    response_model=None,
    responses={
        200: {
            "content": {
                "text/plain": {},
                "application/json": {},
                "text/event-stream": {"description": "with follow=true"},
            }
        }
    },
)
async def get_logs(
    session_id: str,
    principal: CurrentUser,
    logs: Logs,
    follow: Annotated[bool, Query(description="stream live as SSE until the session ends")] = False,
    stream: Annotated[list[Literal["stdout", "stderr", "system"]] | None, Query()] = None,
    format: Annotated[Literal["text", "json"], Query()] = "text",
    attempt: Annotated[
        int | None,
        Query(
            ge=1,
            description="the output of this attempt only (a session runs again after its "
            "node is lost); default: each container's latest attempt",
        ),
    ] = None,
) -> Any:
    """stdout and stderr in arrival order, of each container's latest attempt or of
    ``attempt`` (404 if the session never had it). With ``follow=true``: SSE events
    ``status``, ``progress``, ``log`` and finally ``end`` (with the exit code)."""
    if follow:
        frames = logs.follow(principal, session_id, attempt)
        first = await anext(frames)  # raises NotFound before the stream starts
        return StreamingResponse(
            _prepend(first, frames),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    entries = await logs.read(principal, session_id, set(stream) if stream else None, attempt)
    if format == "json":
        return {"items": entries}
    return PlainTextResponse("".join(e["data"] for e in entries))


async def _prepend(first: str, rest: Any) -> Any:
    yield first
    async for frame in rest:
        yield frame
