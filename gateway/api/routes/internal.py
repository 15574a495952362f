"""/v1/internal: what worker nodes send. A node joins once with the join token and then
presents its own credential, which reaches only what is placed on that node
(``gateway/services/node_credentials.py``)."""

from __future__ import annotations

import base64
import binascii

from fastapi import APIRouter

from contract.messages import (
    LogOffsets,
    LogUpload,
    NodeJoin,
    NodeJoined,
    NodeRedisUser,
    SecretValue,
    SecretValues,
)
from gateway.api.deps import CurrentNode, JoinAuth, Logs, NodeBearer, NodeCredentials, Secrets
from gateway.domain.errors import Invalid
from gateway.services.logs import LogChunkIn

router = APIRouter(prefix="/v1/internal", tags=["internal"])


@router.post(
    "/nodes/join",
    operation_id="internal-join-node",
    response_model=NodeJoined,
    dependencies=[JoinAuth],
)
async def join_node(body: NodeJoin, credentials: NodeCredentials) -> NodeJoined:
    """The node's own credential, shown once; 409 if that node id holds a valid one."""
    credential = await credentials.join(body.node_id)
    return NodeJoined(node_id=body.node_id, credential=credential)


@router.post(
    "/nodes/redis-user", operation_id="internal-node-redis-user", response_model=NodeRedisUser
)
async def node_redis_user(
    node: CurrentNode, bearer: NodeBearer, credentials: NodeCredentials
) -> NodeRedisUser:
    """The calling node's own Redis user, made (again) now: a worker asks at each start,
    so a Redis that lost its users, or a node that joined before nodes had them, gets
    one. ``user`` is null where the gateway gives nodes no users (JOBGATE_REDIS_USERS)."""
    assert bearer is not None  # CurrentNode refused a request without one
    return NodeRedisUser(user=await credentials.redis_user(node, bearer.credentials))


@router.post(
    "/kernels/{kernel_id}/logs", operation_id="internal-append-logs", response_model=LogOffsets
)
async def append_logs(
    kernel_id: str,
    body: LogUpload,
    node: CurrentNode,
    credentials: NodeCredentials,
    logs: Logs,
) -> LogOffsets:
    """Append output of a kernel placed on the calling node, or of an earlier attempt of
    it that ran there; returns how many bytes of each stream of that attempt the gateway
    now holds."""
    await credentials.check_kernel(node, kernel_id, body.attempt)
    try:
        chunks = [
            LogChunkIn(c.stream, c.offset, base64.b64decode(c.data, validate=True))
            for c in body.chunks
        ]
    except binascii.Error:
        raise Invalid("chunk data is not base64", field="chunks.data") from None
    offsets = await logs.append(kernel_id, body.session_id, chunks, body.attempt)
    return LogOffsets(offsets=offsets)


@router.get(
    "/kernels/{kernel_id}/secrets",
    operation_id="internal-kernel-secrets",
    response_model=SecretValues,
)
async def kernel_secrets(
    kernel_id: str, node: CurrentNode, credentials: NodeCredentials, secrets: Secrets
) -> SecretValues:
    """The values of the secrets a kernel placed on the calling node receives (any other
    node: 403); a secret deleted since the submit is left out."""
    await credentials.check_kernel(node, kernel_id, what="fetch the secrets of")
    items = await secrets.values_for_kernel(kernel_id)
    return SecretValues(
        items=[
            SecretValue(name=i["name"], env=i["env"], path=i["path"], value=i["value"])
            for i in items
        ]
    )
