"""Parts for the inference endpoint tests: real replica processes and hand-written routes.

A replica is ``scripts/httpbench.py`` (the server of the ``jobgate-httpbench`` image) run
as a process on a free loopback port; killing it is a replica dying. Routes are
:class:`~contract.endpoints.EndpointRoute` records written to Redis as the controller
would (``write_endpoint_route``: SET + PUBLISH).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import httpx
from redis.asyncio import Redis
from waiting import until

from contract.endpoints import (
    EndpointRoute,
    Probe,
    ReplicaHealth,
    ReplicaTarget,
    TokenGrant,
    token_digest,
    write_endpoint_route,
)
from contract.keys import endpoint_ready_key

HTTPBENCH = Path(__file__).resolve().parents[3] / "scripts" / "httpbench.py"
ENDPOINT_ID = "ep-0001"
TOKEN = "jge_valid-token-0123456789"
EXPIRED_TOKEN = "jge_expired-token-0123456789"


class ReplicaProcess:
    """One httpbench server process."""

    def __init__(self, name: str, process: asyncio.subprocess.Process, port: int) -> None:
        self.name = name
        self.process = process
        self.port = port
        self.upstream = f"http://127.0.0.1:{port}"

    def target(
        self, state: Literal["starting", "serving", "draining"] = "serving", index: int = 0
    ) -> ReplicaTarget:
        return ReplicaTarget(
            session_id=f"session-{self.name}",
            index=index,
            revision=1,
            upstream=self.upstream,
            state=state,
        )

    @property
    def session_id(self) -> str:
        return f"session-{self.name}"

    async def set_ping(self, status: int) -> None:
        async with httpx.AsyncClient() as client:
            response = await client.post(f"{self.upstream}/_control/ping?status={status}")
            response.raise_for_status()

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


@asynccontextmanager
async def replica_processes() -> AsyncIterator[Callable[[str], Awaitable[ReplicaProcess]]]:
    """Start replicas by name; all are killed at the end."""
    started: list[ReplicaProcess] = []

    async def start(name: str) -> ReplicaProcess:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HTTPBENCH),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--replica",
            name,
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 10)
        port = int(line.decode().rsplit(" ", 1)[1])
        replica = ReplicaProcess(name, process, port)
        started.append(replica)
        return replica

    try:
        yield start
    finally:
        for replica in started:
            await replica.kill()


def route(
    *replicas: ReplicaTarget,
    name: str = "iris",
    endpoint_id: str = ENDPOINT_ID,
    owner: str = "user-alice",
    public: bool = False,
    tokens: tuple[TokenGrant, ...] | None = None,
    probe: Probe | None = None,
    **settings: Any,
) -> EndpointRoute:
    if tokens is None:
        tokens = (
            TokenGrant(id="tok-1", digest=token_digest(TOKEN)),
            TokenGrant(id="tok-2", digest=token_digest(EXPIRED_TOKEN), expires_at=time.time() - 1),
        )
    return EndpointRoute(
        endpoint_id=endpoint_id,
        name=name,
        owner_id=owner,
        public=public,
        replicas=replicas,
        tokens=tokens,
        probe=probe or Probe(path="/ping", interval_s=0.2, timeout_s=1.0),
        **settings,
    )


async def publish(redis: Redis, record: EndpointRoute) -> None:
    await write_endpoint_route(redis, record)


async def health(
    redis: Redis, replica: ReplicaProcess, endpoint_id: str = ENDPOINT_ID
) -> ReplicaHealth | None:
    raw = await redis.hget(endpoint_ready_key(endpoint_id), replica.session_id)  # type: ignore[misc]
    return ReplicaHealth.model_validate_json(raw) if raw is not None else None


async def ready(redis: Redis, replica: ReplicaProcess, endpoint_id: str = ENDPOINT_ID) -> None:
    async def check() -> bool:
        verdict = await health(redis, replica, endpoint_id)
        return verdict is not None and verdict.ready

    await until(check, timeout=10, interval=0.02, what=f"{replica.name} ready")


def replica_of(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    name: str = json.loads(response.content)["replica"]
    return name
