"""The long-lived calls to the Podman API, made with aiohttp on the same socket.

podman-py is synchronous, so its calls run in a small thread pool; that is fine for
requests that last milliseconds. Waiting for a container, following its logs and pulling
an image last as long as the container or the download: in a thread each would pin a
pool thread for hours and could not be cancelled (a worker shutting down would hang on
them). Here they are plain coroutines: cancellable, no thread each, no pool to exhaust.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final, TypeVar
from urllib.parse import quote

import aiohttp

from plugins.runtimes.base import ImageNotFound, LogChunk, ProgressCallback, RuntimeFailure

from .wire import FrameDecoder, LogCursor, PullProgress, coalesce, pull_failure

__all__ = ["KernelGone", "StreamClient", "until_done"]

T = TypeVar("T")

LIBPOD: Final = "/v4.0.0/libpod"
COMPAT: Final = "/v1.41"
_RETRIES: Final = (0.2, 0.5, 1.0, 2.0)  # reconnects after the API service went away


class KernelGone(RuntimeFailure):
    """The container no longer exists (removed by someone else, or never created)."""


class StreamClient:
    """Waits, logs and pulls through the API socket; one aiohttp session, made lazily."""

    def __init__(self, socket: str, *, stall_timeout: float) -> None:
        if socket.startswith("unix://"):
            self._unix_path: str | None = socket.removeprefix("unix://")
            self._base = "http://podman"
        else:
            self._unix_path = None
            self._base = "http://" + socket.split("://", 1)[1].rstrip("/")
        self._stall = stall_timeout
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # limit=0: every running container holds two connections (logs and wait).
            connector: aiohttp.BaseConnector = (
                aiohttp.UnixConnector(path=self._unix_path, limit=0)
                if self._unix_path
                else aiohttp.TCPConnector(limit=0)
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- wait -------------------------------------------------------------------------
    async def wait(self, ref: str, interval: float) -> int:
        """Long-poll until the container stopped; its exit code. Survives an API restart.

        Podman checks the state every *interval* seconds and answers ~0.1 s after that;
        the runtime uses this only where it cannot watch the process itself.
        """
        url = f"{self._base}{LIBPOD}/containers/{quote(ref)}/wait"
        params = [
            ("condition", "stopped"),
            ("condition", "exited"),
            ("interval", f"{max(1, round(interval * 1000))}ms"),
        ]
        for delay in (*_RETRIES, None):
            try:
                async with self._http().post(url, params=params) as response:
                    body = await response.text()
                    _check(response.status, body, ref)
                    return int(json.loads(body))
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError):
                if delay is None:
                    raise
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- logs -------------------------------------------------------------------------
    async def logs(
        self, ref: str, offsets: Mapping[str, int], exited: asyncio.Future[Any]
    ) -> AsyncIterator[LogChunk]:
        """stdout/stderr as they come, from *offsets* on, until the container exited.

        Podman's follow stream ends only ~0.25 s after the exit (it polls), so the stream
        is dropped as soon as *exited* resolves and one plain read picks up whatever the
        follow had not delivered yet: the cursor skips what was already yielded.
        """
        cursor = LogCursor(offsets)
        retries = list(_RETRIES)
        while not exited.done():
            try:
                async for chunk in until_done(self._follow(ref, cursor, follow=True), exited):
                    yield chunk
                if not exited.done():
                    return  # the follow ended by itself: Podman saw the exit and sent it all
                break
            except KernelGone:
                return  # removed: what it wrote went with it
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError):
                if not retries:
                    raise
                await asyncio.sleep(retries.pop(0))
            cursor = LogCursor(cursor.shipped())  # re-read from the start, skip the rest
        if not exited.cancelled():
            exited.exception()  # mark a failed watch retrieved; wait() reports it
        try:
            async for chunk in self._follow(ref, LogCursor(cursor.shipped()), follow=False):
                yield chunk
        except KernelGone:
            return

    async def _follow(
        self, ref: str, cursor: LogCursor, *, follow: bool
    ) -> AsyncIterator[LogChunk]:
        url = f"{self._base}{LIBPOD}/containers/{quote(ref)}/logs"
        params = {"follow": "true" if follow else "false", "stdout": "true", "stderr": "true"}
        decoder = FrameDecoder()
        async with self._http().get(url, params=params) as response:
            if response.status != 200:
                _check(response.status, await response.text(), ref)
            async for data in response.content.iter_any():
                for stream, payload in coalesce(decoder.feed(data)):
                    chunk = cursor.chunk(stream, payload)
                    if chunk is not None:
                        yield chunk

    # -- commit and push ---------------------------------------------------------------
    async def commit(self, ref: str, image: str) -> None:
        """``podman commit`` the container *ref* to *image* (``repo:tag``), not paused."""
        repo, _, tag = image.rpartition(":")
        url = f"{self._base}{LIBPOD}/commit"
        params = {"container": ref, "repo": repo, "tag": tag, "pause": "false"}
        try:
            async with self._http().post(url, params=params) as response:
                body = await response.text()
        except aiohttp.ClientError as exc:
            raise RuntimeFailure(f"Podman API failed while committing: {exc}") from exc
        _check(response.status, body, ref)
        if response.status >= 300:
            raise RuntimeFailure(f"commit to {image} failed: {_message(body)}")

    async def push(self, image: str) -> str:
        """Push *image* to its registry; the manifest digest Podman reports ("" if none)."""
        url = f"{self._base}{LIBPOD}/images/{quote(image, safe='')}/push"
        params = {"destination": image, "quiet": "false"}
        try:
            async with self._http().post(url, params=params) as response:
                body = await response.text()
        except aiohttp.ClientError as exc:
            raise RuntimeFailure(f"Podman API failed while pushing {image}: {exc}") from exc
        if response.status >= 300:
            raise RuntimeFailure(f"push of {image} failed: {_message(body)}")
        for line in body.splitlines():
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict) and item.get("error"):
                    raise RuntimeFailure(f"push of {image} failed: {item['error']}")
        # the pushed manifest's digest: the image's RepoDigest in that repository
        url = f"{self._base}{LIBPOD}/images/{quote(image, safe='')}/json"
        async with self._http().get(url) as response:
            data = await response.json() if response.status == 200 else {}
        repository = image.rpartition(":")[0] + "@"
        pushed = [d for d in data.get("RepoDigests") or [] if str(d).startswith(repository)]
        return str(pushed[0]).partition("@")[2] if pushed else str(data.get("Digest") or "")

    # -- pull -------------------------------------------------------------------------
    async def pull(self, image: str, progress: ProgressCallback) -> None:
        """Pull through the Docker-compatible endpoint, which reports per-layer events.

        Any failure is final (ImageNotFound): a wrong name, a registry that refuses,
        one that cannot be reached (RegistryUnreachable, which says so), or no news for
        ``stall_timeout`` seconds.
        """
        url = f"{self._base}{COMPAT}/images/create"
        tracker = PullProgress(image)
        try:
            async with self._http().post(url, params={"fromImage": image}) as response:
                if response.status != 200:
                    raise pull_failure(image, _message(await response.text()))
                while True:
                    async with asyncio.timeout(self._stall):
                        line = await response.content.readline()
                    if not line:
                        return
                    await _pull_event(line, tracker, progress)
        except TimeoutError:
            raise ImageNotFound(image, f"no progress for {self._stall:g} s") from None
        except aiohttp.ClientError as exc:
            raise RuntimeFailure(f"Podman API failed while pulling {image}: {exc}") from exc


async def until_done(source: AsyncIterator[T], done: asyncio.Future[Any]) -> AsyncIterator[T]:
    """Items of *source* until it ends or *done* resolves, whichever comes first.

    When *done* wins, the pending ``anext`` is cancelled; it can only be waiting on I/O
    then, so every item *source* produced has been passed on.
    """
    step: asyncio.Future[T] | None = None
    try:
        while True:
            step = asyncio.ensure_future(anext(source))
            await asyncio.wait({step, done}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                return
            try:
                item = step.result()
            except StopAsyncIteration:
                return
            step = None
            yield item
    finally:
        if step is not None and not step.done():  # done won, or our consumer was cancelled
            step.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await step
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()


async def _pull_event(line: bytes, tracker: PullProgress, progress: ProgressCallback) -> None:
    try:
        event: Any = json.loads(line)
    except ValueError:
        return
    if not isinstance(event, dict):
        return
    error = PullProgress.error(event)
    if error:
        raise pull_failure(tracker.image, error)
    text = tracker.update(event)
    if text:
        await progress(text)


def _message(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()
    if isinstance(data, dict):
        return str(data.get("message") or data.get("cause") or body).strip()
    return body.strip()


def _check(status: int, body: str, ref: str) -> None:
    if status == 404:
        raise KernelGone(f"container {ref[:12]} no longer exists")
    if status >= 400:
        raise RuntimeFailure(f"Podman API error {status}: {_message(body)}")
