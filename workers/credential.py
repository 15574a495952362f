"""The node's own credential: joined for once with the join token, then kept.

A worker with no credential for a node calls ``POST /v1/internal/nodes/join`` with the
join token (``JOBGATE_JOIN_TOKEN``, or the deprecated ``JOBGATE_NODE_TOKEN``) and saves
what it gets to ``DATA_DIR/worker/{node}/node-credential`` (0600, written atomically);
a restart reads it back and never joins again. The gateway refuses a second join of a
node whose credential is valid (409), so a join-token holder cannot take over a node;
after ``jobgate nodes revoke NODE`` remove the file and restart the worker to join anew.

:func:`redis_login`: where the gateway gives each node a Redis user of its own
(``JOBGATE_REDIS_USERS``, :mod:`contract.acl`), the worker asks for it at each start and
logs in to Redis as that user, with a password derived from its credential (and never
with the login its Redis URL names); where the gateway gives none, with that login.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import httpx

from contract.acl import node_redis_password
from contract.messages import NodeJoin, NodeJoined, NodeRedisUser
from plumbing.redis_login import with_login

__all__ = [
    "CREDENTIAL_FILE",
    "JoinFailed",
    "credential_path",
    "node_credential",
    "redis_login",
]

CREDENTIAL_FILE = "node-credential"

log = logging.getLogger(__name__)


class JoinFailed(RuntimeError):
    """The node has no credential and could not get one."""


def credential_path(data_dir: Path, node_id: str) -> Path:
    return data_dir / "worker" / node_id / CREDENTIAL_FILE


def _save(path: Path, credential: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(credential + "\n")
    os.replace(tmp, path)


async def _post(
    http: httpx.AsyncClient, path: str, bearer: str, body: str, wait_s: float, what: str
) -> httpx.Response:
    """POST to the gateway; one not answering yet (or a 502/503/504 in front of it) is
    asked again, with backoff, for up to *wait_s* seconds."""
    deadline = time.monotonic() + wait_s
    pause = 0.2
    while True:
        try:
            response = await http.post(
                path,
                content=body,
                headers={"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"},
            )
        except httpx.TransportError as e:
            if time.monotonic() + pause > deadline:
                raise JoinFailed(f"{what}: {e!r}") from None
        else:
            if response.status_code not in (502, 503, 504) or time.monotonic() + pause > deadline:
                return response
        log.info("%s: the gateway does not answer yet; again in %.1fs", what, pause)
        await asyncio.sleep(pause)
        pause = min(pause * 2, 5.0)


def _refused(what: str, response: httpx.Response) -> JoinFailed:
    try:
        detail = response.json().get("detail", "")
    except ValueError:
        detail = response.text[:200]
    return JoinFailed(f"{what}: HTTP {response.status_code} {detail}")


async def node_credential(
    http: httpx.AsyncClient, data_dir: Path, node_id: str, join_token: str, wait_s: float = 120.0
) -> str:
    """*node_id*'s credential: the saved one, else one got by joining with *join_token*
    (waiting up to *wait_s* seconds for a gateway that does not answer yet)."""
    path = credential_path(data_dir, node_id)
    try:
        saved = path.read_text().strip()
    except FileNotFoundError:
        saved = ""
    if saved:
        return saved
    if not join_token:
        raise JoinFailed(
            f"node {node_id} has no credential ({path}) and no join token to get one: "
            "set JOBGATE_JOIN_TOKEN"
        )
    what = f"node {node_id} could not join"
    body = NodeJoin(node_id=node_id).model_dump_json()
    response = await _post(http, "/v1/internal/nodes/join", join_token, body, wait_s, what)
    if response.status_code != 200:
        raise _refused(what, response)
    credential = NodeJoined.model_validate_json(response.content).credential
    _save(path, credential)
    return credential


async def redis_login(
    http: httpx.AsyncClient,
    redis_url: str,
    node_id: str,
    credential: str,
    wait_s: float = 120.0,
) -> str:
    """The Redis URL this node's worker uses. The gateway is asked for the node's own
    Redis user (made again for it now: a Redis that lost it, a node that joined before
    nodes had users); with one, *redis_url* with that user and the password derived from
    the credential, never the login *redis_url* names; without, *redis_url* as given."""
    what = f"node {node_id} could not get its Redis user"
    path = "/v1/internal/nodes/redis-user"
    response = await _post(http, path, credential, "{}", wait_s, what)
    if response.status_code == 404:  # a gateway older than the route (a rolling upgrade)
        return redis_url
    if response.status_code != 200:
        raise _refused(what, response)
    user = NodeRedisUser.model_validate_json(response.content).user
    if user is None:
        return redis_url
    log.info("node %s: Redis as its own user %s", node_id, user)
    return with_login(redis_url, user, node_redis_password(node_id, credential))
