"""/v1/internal: what worker nodes send with their node token (log uploads)."""

from __future__ import annotations

import base64
import binascii

from fastapi import APIRouter

from contract.messages import LogOffsets, LogUpload
from gateway.api.deps import NodeAuth, State
from gateway.domain.errors import Invalid
from gateway.services.logs import LogChunkIn

router = APIRouter(prefix="/v1/internal", tags=["internal"], dependencies=[NodeAuth])


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
    offsets = await state.logs.append(kernel_id, body.session_id, chunks, body.attempt)
    return LogOffsets(offsets=offsets)
