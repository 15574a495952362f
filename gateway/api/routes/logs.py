"""/v1/sessions/{id}/logs: whole, as text or JSON, or followed live as Server-Sent Events."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse, StreamingResponse

from gateway.api.deps import CurrentUser, State

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
    state: State,
    follow: Annotated[bool, Query(description="stream live as SSE until the session ends")] = False,
    stream: Annotated[list[Literal["stdout", "stderr", "system"]] | None, Query()] = None,
    format: Annotated[Literal["text", "json"], Query()] = "text",
) -> Any:
    """stdout and stderr in arrival order. With ``follow=true``: SSE events ``status``,
    ``progress``, ``log`` and finally ``end`` (with the exit code)."""
    if follow:
        frames = state.logs.follow(principal, session_id)
        first = await anext(frames)  # raises NotFound before the stream starts
        return StreamingResponse(
            _prepend(first, frames),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    entries = await state.logs.read(principal, session_id, set(stream) if stream else None)
    if format == "json":
        return {"items": entries}
    return PlainTextResponse("".join(e["data"] for e in entries))


async def _prepend(first: str, rest: Any) -> Any:
    yield first
    async for frame in rest:
        yield frame
