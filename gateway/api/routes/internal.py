"""/v1/internal: what worker nodes send with their node token (log uploads)."""

from __future__ import annotations

import base64
import binascii

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from gateway.api.deps import NodeAuth, State
from gateway.domain.errors import Invalid
from gateway.services.logs import LogChunkIn

router = APIRouter(prefix="/v1/internal", tags=["internal"], dependencies=[NodeAuth])


class ChunkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stream: str = Field(pattern="^(stdout|stderr)$")
    offset: int = Field(ge=0)
    data: str = Field(description="base64")


class LogUpload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str
    chunks: list[ChunkIn] = Field(max_length=1024)


class LogOffsets(BaseModel):
    offsets: dict[str, int]


@router.post(
    "/kernels/{kernel_id}/logs", operation_id="internal-append-logs", response_model=LogOffsets
)
async def append_logs(kernel_id: str, body: LogUpload, state: State) -> LogOffsets:
    """Append output; returns how many bytes of each stream the gateway now holds."""
    try:
        chunks = [
            LogChunkIn(c.stream, c.offset, base64.b64decode(c.data, validate=True))
            for c in body.chunks
        ]
    except binascii.Error:
        raise Invalid("chunk data is not base64", field="chunks.data") from None
    offsets = await state.logs.append(kernel_id, body.session_id, chunks)
    return LogOffsets(offsets=offsets)
