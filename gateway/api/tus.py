"""The byte protocols of data folders: tus 1.0 uploads and ``Range`` downloads.

::

    PATCH body ─▶ jobgate.request.body_to_file: splice, socket ─▶ file (api/http11.py)
               ─▶ or (chunked, or another server): receive() pieces, kept as they came,
                  os.writev of 8 MiB of them in a thread while the next 8 MiB arrive
    GET        ◀─ http.response.zerocopy: os.sendfile, file to socket (api/http11.py)
               ◀─ or, on a server without it: os.pread 8 MiB (a thread), next read in flight

The routes (``api/routes/folders.py``) check who may do what; this module moves the
bytes. On the gateway's own protocol (``api/http11.py``) no byte of an upload or a
download passes through Python: the kernel splices the one from the socket into the
part file and sends the other from the file. Elsewhere (tests on a plain ASGI
transport) the bytes go through ASGI messages, 8 MiB disk reads and writes in worker
threads. An append holds an exclusive ``flock`` on the part file, so a request still
flushing after its client went away finishes before the next append checks the offset;
a body longer than what the upload has left is refused before a byte is written when
its Content-Length says so, else when it gets there.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import fcntl
import os
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.domain.errors import Conflict, Invalid, JobgateError

__all__ = [
    "CHUNK",
    "TUS_MEDIA",
    "TUS_VERSION",
    "ZEROCOPY",
    "FileRange",
    "Unsatisfiable",
    "append",
    "byte_range",
    "metadata",
    "read_range",
    "settled_offset",
    "tus_headers",
]

TUS_VERSION = "1.0.0"
TUS_MEDIA = "application/offset+octet-stream"
#: one disk read or write; RSS grows by a few of these per transfer, never by the file
CHUNK = 8 * 1024 * 1024
#: the ASGI zero-copy send extension (``api/http11.py`` offers it)
ZEROCOPY = "http.response.zerocopy"
#: the gateway protocol's own: the request body spliced onto a file (``api/http11.py``)
BODY_TO_FILE = "jobgate.request.body_to_file"
#: the most pieces one ``writev`` takes (Linux's IOV_MAX)
IOV_MAX = 1024
#: an append waits this long (in LOCK_POLL_S steps) for a request still writing the part
LOCK_WAIT_S = 10.0
LOCK_POLL_S = 0.05


class Unsatisfiable(JobgateError):
    status = 416
    title = "Range not satisfiable"


def tus_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    return {"Tus-Resumable": TUS_VERSION, "Cache-Control": "no-store", **(headers or {})}


def metadata(header: str | None) -> dict[str, str]:
    """tus ``Upload-Metadata``: ``key base64value,key2 base64value2``."""
    found: dict[str, str] = {}
    for item in (header or "").split(","):
        key, _, value = item.strip().partition(" ")
        if not key:
            continue
        try:
            found[key] = base64.b64decode(value, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise Invalid(
                f"Upload-Metadata {key!r} is not base64 UTF-8", field="Upload-Metadata"
            ) from None
    return found


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``bytes=a-b`` | ``bytes=a-`` | ``bytes=-n`` -> (start, end inclusive); None: all."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None  # no range, another unit, or several ranges: the whole file (RFC 9110)
    first, sep, last = header.removeprefix("bytes=").strip().partition("-")
    if not sep or not (first + last).isascii():  # "²".isdigit(), yet int("²") fails
        return None
    if not (first.isdigit() or last.isdigit()):
        return None
    if not first:
        length = int(last)
        if length == 0 or size == 0:
            raise Unsatisfiable(f"a suffix range of {length} bytes of a {size}-byte file")
        return max(0, size - length), size - 1
    start = int(first)
    end = min(int(last), size - 1) if last.isdigit() else size - 1
    if start >= size or (last.isdigit() and int(last) < start):
        raise Unsatisfiable(f"bytes {header.removeprefix('bytes=')} of a {size}-byte file")
    return start, end


def _close_after(fd: int, pending: asyncio.Future[Any] | None) -> None:
    """Close *fd* now, or once the read or write a thread still runs on it is done (a
    cancelled request must not close, and so free for reuse, a descriptor in use)."""
    if pending is None or pending.done():
        os.close(fd)
        return

    def done(future: asyncio.Future[Any]) -> None:
        os.close(fd)
        if not future.cancelled():
            future.exception()  # retrieved: nobody awaits it any more

    pending.add_done_callback(done)


async def read_range(fd: int, start: int, end: int) -> AsyncGenerator[bytes, None]:
    """Bytes *start*..*end* (inclusive) of *fd*, which it closes; the next read runs
    while the caller sends the last one."""
    loop = asyncio.get_running_loop()

    def read(offset: int) -> asyncio.Future[bytes]:
        return loop.run_in_executor(None, os.pread, fd, min(CHUNK, end - offset + 1), offset)

    offset = start
    pending = read(offset) if offset <= end else None
    try:
        while pending is not None:
            chunk = await pending
            pending = None
            if not chunk:
                break
            offset += len(chunk)
            if offset <= end:
                pending = read(offset)
            yield chunk
    finally:
        _close_after(fd, pending)


class FileRange(StreamingResponse):
    """Bytes *start*..*end* (inclusive) of *fd*, which it closes: sent by the kernel
    (``http.response.zerocopy``) where the server offers it, else read and streamed by
    :func:`read_range`. The headers must carry the range's ``Content-Length``."""

    def __init__(
        self, fd: int, start: int, end: int, status_code: int, headers: dict[str, str]
    ) -> None:
        self.fd, self.start, self.count = fd, start, max(0, end - start + 1)
        self._chunks = read_range(fd, start, end)  # runs (and closes fd) only if streamed
        super().__init__(
            self._chunks,
            status_code=status_code,
            headers=headers,
            media_type="application/octet-stream",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if ZEROCOPY not in scope.get("extensions", {}) or not self.count:
            await super().__call__(scope, receive, send)
            return
        await self._chunks.aclose()  # never started: it holds nothing
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            await send(
                {
                    "type": ZEROCOPY,
                    "file": self.fd,
                    "offset": self.start,
                    "count": self.count,
                    "more_body": False,
                }
            )
        finally:
            os.close(self.fd)  # the server sent from a duplicate of its own


async def _lock(fd: int, mode: int = fcntl.LOCK_EX) -> None:
    """A lock on the part file: a request that lost its client may still be writing
    what it received; wait for it (bounded), then the size is the true offset."""
    for _ in range(int(LOCK_WAIT_S / LOCK_POLL_S)):
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            await asyncio.sleep(LOCK_POLL_S)
    raise Conflict("another request is still appending to this upload; HEAD it and retry")


async def settled_offset(fd: int) -> int:
    """The part file's size once no request is writing it (a bounded wait for one that
    still is: then its size so far); closes *fd*."""
    try:
        with contextlib.suppress(Conflict):
            await _lock(fd, fcntl.LOCK_SH)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _write_all(fd: int, pieces: list[bytes]) -> None:
    """All of *pieces*, in order, onto *fd*: ``writev`` (IOV_MAX at a time), no copy."""
    views = [memoryview(p) for p in pieces]
    while views:
        batch = views[:IOV_MAX]
        n = os.writev(fd, batch)
        while n:  # drop what was written; a partial piece keeps its tail
            if n >= len(views[0]):
                n -= len(views.pop(0))
            else:
                views[0], n = views[0][n:], 0


class _Writer:
    """Pieces onto *fd*: they gather until CHUNK bytes, then a thread writes them while
    the next ones arrive (two batches at most in memory)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pieces: list[bytes] = []
        self.used = 0  # bytes gathered, not yet handed to the disk
        self.written = 0  # bytes handed to the disk
        self.writing: asyncio.Future[None] | None = None

    async def add(self, data: bytes) -> None:
        if not data:
            return
        self.pieces.append(data)
        self.used += len(data)
        if self.used >= CHUNK:
            await self._swap()

    async def _swap(self) -> None:
        await self.wait()  # one batch on its way to disk at a time
        pieces, self.pieces = self.pieces, []
        loop = asyncio.get_running_loop()
        self.writing = loop.run_in_executor(None, _write_all, self.fd, pieces)
        self.written += self.used
        self.used = 0

    async def wait(self) -> None:
        if self.writing is not None:
            await self.writing
            self.writing = None

    async def flush(self) -> None:
        if self.used:
            await self._swap()
        await self.wait()

    def close(self) -> None:
        _close_after(self.fd, self.writing)


def _past_end(length: int) -> Invalid:
    return Invalid(
        f"the upload is {length} bytes; this body goes past its end", field="Upload-Length"
    )


async def _splice(fd: int, offset: int, length: int, request: Request) -> int | None:
    """The body onto *fd* by the server's ``jobgate.request.body_to_file`` (splice, no
    byte through Python): the bytes written; None where the server or the request has
    no such way (no extension, no Content-Length): then the body is streamed."""
    extension = request.scope.get("extensions", {}).get(BODY_TO_FILE)
    declared = request.headers.get("content-length", "")
    if extension is None or not declared.isdigit():
        return None
    if offset + int(declared) > length:
        raise _past_end(length)  # refused before a byte is written
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_APPEND)  # splice refuses O_APPEND files
    os.lseek(fd, 0, os.SEEK_END)  # the offset checked under the lock: the part's end
    write: Callable[[int], Awaitable[int | None]] = extension["write"]
    return await write(fd)


async def append(fd: int, offset: int, length: int, request: Request) -> int:
    """Write the request body onto the part file *fd* (opened for append) and close it;
    the new offset. The body must start at *offset* (checked under the lock) and must not
    go past *length*. What arrived before a disconnect stays, so the client resumes there."""
    writer = _Writer(fd)
    try:
        await _lock(fd)
        held = os.fstat(fd).st_size
        if held != offset:
            raise Conflict(f"the upload is at offset {held}, not {offset}", offset=held)
        spliced = await _splice(fd, offset, length, request)
        if spliced is not None:
            return offset + spliced
        try:
            async for piece in request.stream():
                if offset + writer.written + writer.used + len(piece) > length:
                    raise _past_end(length)
                await writer.add(piece)
        except ClientDisconnect:
            pass
        except Exception:
            await writer.wait()  # what is on its way to disk lands; the rest is dropped
            raise
        await writer.flush()
        return offset + writer.written
    finally:
        writer.close()
