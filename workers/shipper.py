"""Upload a kernel's output to the gateway, live, resuming from byte offsets.

One uploader per kernel drains a queue of chunks: it sends what is there as soon as
the first chunk arrives (a line printed reaches the user at once) and batches whatever
arrived meanwhile. The gateway answers with the offsets it holds; those are what the
worker persists, so after a restart it resumes exactly there.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import logging
from collections.abc import Callable

import httpx

from contract.messages import LogChunkWire, LogOffsets, LogUpload, SecretValue, SecretValues
from contract.secrets import secrets_path
from plugins.runtimes.base import LogChunk, RuntimeFailure

__all__ = ["KernelLogUploader", "LogClient"]

log = logging.getLogger(__name__)
MAX_REQUEST_BYTES = 1024 * 1024


class LogClient:
    """The gateway's internal log endpoint, with a node's own credential. One HTTP
    client per process; :meth:`as_node` gives each node of a sim host its credential."""

    def __init__(self, gateway_url: str, credential: str) -> None:
        self.http = httpx.AsyncClient(
            base_url=gateway_url,
            timeout=httpx.Timeout(30.0, connect=5.0),
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=16),
        )
        self.auth = {"Authorization": f"Bearer {credential}"}

    def as_node(self, credential: str) -> LogClient:
        """This client (same connections), presenting another node's credential."""
        view = copy.copy(self)
        view.auth = {"Authorization": f"Bearer {credential}"}
        return view

    async def upload(
        self, kernel_id: str, session_id: str, chunks: list[LogChunk], attempt: int | None = None
    ) -> dict[str, int]:
        body = LogUpload(
            session_id=session_id,
            attempt=attempt,
            chunks=[
                LogChunkWire(
                    stream=c.stream, offset=c.offset, data=base64.b64encode(c.data).decode()
                )
                for c in chunks
            ],
        )
        response = await self.http.post(
            f"/v1/internal/kernels/{kernel_id}/logs",
            content=body.model_dump_json(),
            headers={"Content-Type": "application/json"} | self.auth,
        )
        if response.status_code == 404:  # (or an attempt of it the gateway never placed)
            raise LookupError(f"the gateway does not know kernel {kernel_id}")
        response.raise_for_status()
        return LogOffsets.model_validate_json(response.content).offsets

    async def secrets(self, kernel_id: str) -> list[SecretValue]:
        """The values of the user secrets *kernel_id* receives (docs/secrets.md); only
        for a kernel placed on this node. Never logged."""
        response = await self.http.get(secrets_path(kernel_id), headers=self.auth)
        if response.status_code >= 400:
            raise RuntimeFailure(
                f"fetching the secrets of kernel {kernel_id}: HTTP {response.status_code}"
            )
        return SecretValues.model_validate_json(response.content).items

    async def close(self) -> None:
        await self.http.aclose()


class KernelLogUploader:
    def __init__(
        self,
        client: LogClient,
        kernel_id: str,
        session_id: str,
        on_acked: Callable[[dict[str, int]], None],
        attempt: int | None = None,
    ) -> None:
        self.client = client
        self.kernel_id = kernel_id
        self.session_id = session_id
        self.attempt = attempt
        self.on_acked = on_acked
        self._queue: asyncio.Queue[LogChunk | None] = asyncio.Queue(maxsize=256)
        self._task = asyncio.create_task(self._run(), name=f"logs-{kernel_id[:8]}")

    async def put(self, chunk: LogChunk) -> None:
        await self._queue.put(chunk)  # waits when the gateway is slow: backpressure

    async def finish(self, timeout: float = 120.0) -> bool:
        """Upload everything queued, then stop. False if it could not in time."""
        await self._queue.put(None)
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            self._task.cancel()
            return False
        return True

    async def _run(self) -> None:
        done = False
        while not done:
            first = await self._queue.get()
            if first is None:
                return
            batch, size = [first], len(first.data)
            while not self._queue.empty() and size < MAX_REQUEST_BYTES:
                item = self._queue.get_nowait()
                if item is None:
                    done = True
                    break
                batch.append(item)
                size += len(item.data)
            await self._send(batch)

    async def _send(self, batch: list[LogChunk]) -> None:
        delay = 0.2
        while True:
            try:
                self.on_acked(
                    await self.client.upload(self.kernel_id, self.session_id, batch, self.attempt)
                )
                return
            except LookupError:
                log.warning("dropping output of kernel %s: unknown to the gateway", self.kernel_id)
                return
            except (httpx.HTTPError, OSError) as exc:
                log.warning("log upload for %s failed (%s); retrying", self.kernel_id[:8], exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
