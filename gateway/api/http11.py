"""The gateway's HTTP/1.1 protocol: uvicorn's httptools one, plus what data folders need
to move bytes at disk speed, which plain ASGI cannot do.

::

    GET   file ─▶ http.response.start ─▶ http.response.zerocopy {file, offset, count}
                   └▶ one thread: os.sendfile(socket, file) until count (no Python per chunk)
    PATCH body ─▶ jobgate.request.body_to_file {write(fd)}: reading paused, then one thread:
                   what the parser had, then os.splice(socket ─▶ pipe ─▶ file) until
                   Content-Length; the connection closes after the answer
              └▶ otherwise (chunked): on_body keeps httptools' pieces as they are ─▶
                   receive() joins them (one piece: no copy; uvicorn copies every byte twice)

``http.response.zerocopy`` is the ASGI zero-copy send extension
(https://asgi.readthedocs.io/en/latest/extensions.html#zero-copy-send), offered in
``scope["extensions"]`` on plain-TCP connections only (``sendfile`` cannot encrypt):
an app that finds it sends its body with ``os.sendfile`` from the file to the socket,
else it streams the bytes itself (``api/tus.py`` does both). The response must carry a
``Content-Length``. ``jobgate.request.body_to_file`` is this protocol's own: its
``write(fd)`` puts the rest of a Content-Length body onto *fd* inside the kernel and
says how many bytes (fewer when the client went away); ``None`` when the app already
``receive()``d some of it. The parser never sees those bytes, so that connection is not
reused. Either way the event loop does one thing per body, and a slow peer holds a
thread of its own, never the loop nor the default executor's threads.

uvicorn builds its ``RequestResponseCycle`` itself; :class:`GatewayProtocol` turns each
new cycle into a :class:`GatewayCycle` (a subclass with no state of its own beyond the
body's pieces) right after uvicorn made it, before its task first runs. The internals read
here are those of the uvicorn releases ``pyproject.toml`` pins (the app proxy's fast lane
reads the same ones: ``appproxy/fastlane/compat.py``);
``tests/unit/gateway/test_http11_internals.py`` fails loudly when one of them is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import select
import threading
import time
from typing import Any

from uvicorn._types import ASGIReceiveEvent, ASGISendEvent
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

__all__ = ["BODY_TO_FILE", "ZEROCOPY", "GatewayCycle", "GatewayProtocol"]

log = logging.getLogger(__name__)

ZEROCOPY = "http.response.zerocopy"
#: one sendfile call at most (Linux moves at most ~2 GiB per call anyway)
SENDFILE_MAX = 1 << 30
#: how often a thread waiting for the socket to drain looks whether it should stop
POLL_MS = 200
#: a transfer whose peer moved no byte for this long ends (a thread is not held for ever
#: by a client that stalls without closing)
IDLE_S = 300.0
#: transfers in threads at once; above it, new requests are offered neither extension
#: and take the ordinary (streamed) path, so stalled clients cannot pile up threads
MAX_TRANSFERS = 64
#: the request body's bytes written to a file by splice (``BodyToFile`` in the extension)
BODY_TO_FILE = "jobgate.request.body_to_file"
#: one splice through the pipe (Linux's default cap on a pipe's size)
PIPE_SIZE = 1 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def _splice(sock: int, file: int, head: list[bytes], count: int, stop: threading.Event) -> int:
    """Write *head* (what the parser already had) and then *count* more bytes from the
    non-blocking *sock* onto *file*, inside the kernel (socket ─▶ pipe ─▶ file); both
    are this thread's own duplicates, closed here. The bytes written (fewer than all:
    the peer closed, or *stop* was set)."""
    written = 0
    try:
        for piece in head:
            view = memoryview(piece)
            while view:
                view = view[os.write(file, view) :]
            written += len(piece)
        r, w = os.pipe()
        try:
            with contextlib.suppress(OSError):  # a bigger pipe, where the system allows it
                fcntl.fcntl(w, F_SETPIPE_SZ, PIPE_SIZE)
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            left = count
            last = time.monotonic()
            while left and not stop.is_set():
                try:
                    moved = os.splice(sock, w, min(left, PIPE_SIZE))
                except BlockingIOError:
                    if time.monotonic() - last > IDLE_S:
                        break  # the peer stalled: what arrived stays
                    poller.poll(POLL_MS)  # the peer sends slower than the disk takes
                    continue
                except ConnectionError:
                    break  # the peer went away: what arrived stays
                if not moved:
                    break  # the peer closed: what arrived stays
                left -= moved
                last = time.monotonic()
                while moved:
                    n = os.splice(r, file, moved)
                    moved -= n
                    written += n
        finally:
            os.close(r)
            os.close(w)
        return written
    finally:
        os.close(sock)
        os.close(file)


def _sendfile(sock: int, file: int, offset: int, count: int, stop: threading.Event) -> int:
    """Send *count* bytes of *file* from *offset* on the non-blocking *sock*; both are
    this thread's own duplicates, closed here. The bytes sent (fewer: the file is shorter
    than it was, or *stop* was set)."""
    sent = 0
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    last = time.monotonic()
    try:
        while sent < count and not stop.is_set():
            try:
                n = os.sendfile(sock, file, offset + sent, min(count - sent, SENDFILE_MAX))
            except BlockingIOError:
                if time.monotonic() - last > IDLE_S:
                    break  # the peer stopped reading
                poller.poll(POLL_MS)  # the peer reads slower than the disk: wait for room
                continue
            if n == 0:
                break  # end of file: it was truncated after the headers went out
            sent += n
            last = time.monotonic()
        return sent
    finally:
        os.close(sock)
        os.close(file)


class GatewayCycle(RequestResponseCycle):
    """One request and its answer, with ``http.response.zerocopy`` and copy-free bodies."""

    pieces: list[bytes]
    held: int
    received: int  # body bytes the parser has seen

    def adopt(self) -> None:
        """State of its own, on a cycle uvicorn made as a ``RequestResponseCycle``."""
        self.pieces = []
        self.held = 0
        self.received = 0

    def content_length(self) -> int | None:
        lengths = [v for k, v in self.scope["headers"] if k == b"content-length"]
        chunked = any(k == b"transfer-encoding" for k, _ in self.scope["headers"])
        if chunked or len(lengths) != 1 or not lengths[0].isdigit():
            return None
        return int(lengths[0])

    async def body_to_file(self, fd: int) -> int | None:
        """The rest of the request body (its ``Content-Length``) onto *fd*, by splice:
        the bytes written, fewer if the client went away; None where the body cannot be
        spliced (no Content-Length, or some of it already received by the app): then
        ``receive()`` it. *fd* must not be ``O_APPEND`` (splice refuses it); the bytes
        go at its position. The connection closes after the response (the parser never
        saw the spliced bytes), so the next request comes on a new one."""
        length = self.content_length()
        if length is None or self.received > length or self.disconnected:
            return None
        if self.response_started or self.held != self.received:
            return None  # some of the body went to receive() already
        if self.received == length:
            return None  # the parser has all of it: receive() it, the connection stays
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False
        self.flow.pause_reading()  # from here the socket is ours until the body ends
        self.keep_alive = False
        head, self.pieces, self.held = self.pieces, [], 0
        rest = length - self.received
        self.received = length
        sock = self.transport.get_extra_info("socket")
        mine = os.dup(sock.fileno()), os.dup(fd)
        try:
            return await _in_thread(_splice, mine, head, rest)
        finally:
            self.more_body = False
            self.message_event.set()  # a receive() now says: nothing more

    async def receive(self) -> ASGIReceiveEvent:
        # uvicorn's own receive(), the body as httptools gave it (joined: one copy at most)
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            self.flow.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        body = self.pieces[0] if len(self.pieces) == 1 else b"".join(self.pieces)
        self.pieces, self.held = [], 0
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] != ZEROCOPY:
            await super().send(message)
            return
        zc: dict[str, Any] = dict(message)
        if self.disconnected:
            return  # as uvicorn's send() does: the client left, perhaps before the head
        if not self.response_started or self.response_complete:
            raise RuntimeError(f"'{ZEROCOPY}' needs a started, unfinished response")
        if self.chunked_encoding:
            raise RuntimeError(f"'{ZEROCOPY}' needs a response with a Content-Length")
        file = zc["file"]
        fd = file if isinstance(file, int) else file.fileno()
        offset = int(zc.get("offset") or 0)
        count = zc.get("count")
        count = os.fstat(fd).st_size - offset if count is None else int(count)
        if self.scope["method"] == "HEAD":
            count = 0
        elif count > self.expected_content_length:
            raise RuntimeError("Response content longer than Content-Length")
        if count > 0 and not self.disconnected:
            sent = await self._send_file(fd, offset, count)
            if sent < count:  # the client went away, or the file shrank: end the connection
                self.disconnected = True
                self.transport.close()
                return
            self.expected_content_length -= count
        await super().send(
            {"type": "http.response.body", "body": b"", "more_body": bool(zc.get("more_body"))}
        )

    async def _send_file(self, fd: int, offset: int, count: int) -> int:
        if self.transport.get_write_buffer_size():
            # what uvicorn still buffers (the headers; mostly nothing) goes out first:
            # with no room at all, the transport pauses writing until it is empty
            self.transport.set_write_buffer_limits(high=0)
            try:
                await self.flow.drain()
            finally:
                self.transport.set_write_buffer_limits()
        if self.disconnected:
            return 0
        sock = self.transport.get_extra_info("socket")
        # duplicates: the thread's descriptors stay valid (and never name another file)
        # whatever closes the connection or the file meanwhile
        mine = os.dup(sock.fileno()), os.dup(fd)
        try:
            return await _in_thread(_sendfile, mine, offset, count)
        except OSError as exc:  # the peer went away (EPIPE, ECONNRESET)
            log.debug("sendfile ended: %s", exc)
            return -1


async def _in_thread(work: Any, fds: tuple[int, int], *args: Any) -> int:
    """``work(*fds, *args, stop)`` in a thread of its own (never the default executor's:
    a slow peer holds it for as long as it is slow); its OSError is raised here.
    Cancelled (shutdown): *stop* is set, and the thread ends within POLL_MS."""
    global _active
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    stop = threading.Event()

    def run() -> None:
        result: int | OSError
        try:
            result = work(*fds, *args, stop)
        except OSError as exc:
            result = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(_settle, done, result)

    try:
        threading.Thread(target=run, name=work.__name__.strip("_"), daemon=True).start()
    except RuntimeError:  # no thread to be had: the descriptors were the thread's to close
        for fd in fds:
            os.close(fd)
        raise
    _active += 1
    try:
        return await asyncio.shield(done)
    finally:
        _active -= 1
        stop.set()


#: transfers in threads now (counted on the event loop; a cancelled one's thread ends
#: within POLL_MS of leaving the count)
_active = 0


def _settle(future: asyncio.Future[int], result: int | OSError) -> None:
    if future.done():
        return
    if isinstance(result, OSError):
        future.set_exception(result)
    else:
        future.set_result(result)


class GatewayProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose cycles are :class:`GatewayCycle` s."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if (
            cycle is None
            or cycle.scope is not self.scope
            or type(cycle) is not RequestResponseCycle
        ):
            return  # an upgrade (WebSocket): uvicorn made no cycle for it
        cycle.__class__ = GatewayCycle
        assert isinstance(cycle, GatewayCycle)
        cycle.adopt()
        if (
            self.scheme == "http"
            and _active < MAX_TRANSFERS
            and self.transport.get_extra_info("socket") is not None
        ):
            extensions: dict[str, dict[object, object]] = self.scope.setdefault("extensions", {})
            extensions[ZEROCOPY] = {}
            extensions[BODY_TO_FILE] = {"write": cycle.body_to_file}

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if not isinstance(cycle, GatewayCycle):
            super().on_body(body)
            return
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        cycle.pieces.append(body)  # httptools' own bytes object: kept, not copied
        cycle.held += len(body)
        cycle.received += len(body)
        if cycle.held > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.message_event.set()
