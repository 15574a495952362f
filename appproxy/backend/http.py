"""Forward one HTTP request to an app and stream the answer back, both ways unbuffered.

    client ──body chunks as they arrive──▶ ConnectionPool (keep-alive) ──▶ app
    client ◀──each chunk as it arrives──── Response ◀────────────────── app (SSE, chunked)

Bodies are never read whole: request chunks are passed on as ASGI delivers them (a
large upload reaches the app while it is still being sent) and response chunks go out
as soon as they arrive (a Server-Sent Event is not held back). Encodings pass through
as they are. If the client goes away, the exchange with the app is cancelled and its
connection closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Final

from appproxy.asgi import Receive, Scope, Send
from appproxy.backend.client import (
    ConnectionPool,
    Response,
    UpstreamBroken,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from appproxy.backend.headers import response_headers
from appproxy.backend.http1 import Origin
from appproxy.backend.timers import CoarseTimers
from appproxy.backend.upstream import Upstream
from appproxy.pages import APP_NOT_ANSWERING, APP_TIMED_OUT, send_page

__all__ = ["HttpForwarder"]

log = logging.getLogger(__name__)

_WATCH_AFTER: Final = 0.5


class _DisconnectWatch:
    """Cancels the forwarding task when the client disconnects (``http.disconnect``).

    Watching costs a task, so it starts only when it matters: once the answer turns out
    to be a stream, or when the app has not answered within ``_WATCH_AFTER`` seconds. A
    quick request-response exchange never needs it. It also waits until the request
    body has been read, since only one reader may call ``receive()``.
    """

    def __init__(self, receive: Receive, timers: CoarseTimers, *, body_pending: bool) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("forwarding runs in a task")
        self._task = task
        self._receive = receive
        self._timers = timers
        self._ready = not body_pending
        self._wanted = False
        self._watcher: asyncio.Task[None] | None = None
        self.gone = False
        self.finishing = False

    def want(self) -> None:
        self._wanted = True
        if self._ready and self._watcher is None:
            self._watcher = asyncio.create_task(self._watch())

    def want_later(self, delay: float) -> None:
        self._timers.arm(self, delay, self.want)

    def body_done(self) -> None:
        self._ready = True
        if self._wanted:
            self.want()

    def stop(self) -> None:
        self._timers.disarm(self)
        if self._watcher is not None:
            self._watcher.cancel()

    def caused(self) -> bool:
        """Whether a CancelledError being handled was ours (and nobody else's)."""
        return self.gone and self._task.uncancel() == 0

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        if not self.finishing:
            self.gone = True
            self._task.cancel()


class _RequestBody:
    """The client's body as an async iterator of chunks, for the client to send on."""

    def __init__(self, receive: Receive, watch: _DisconnectWatch) -> None:
        self._receive = receive
        self._watch = watch
        self.disconnected = False

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                raise ConnectionResetError("client went away during the upload")
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                self._watch.body_done()  # receive() is free for the watch now
                return


def _body_framing(scope: Scope) -> tuple[bool, bool]:
    """(has a body, needs chunked encoding towards the app)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.strip() != b"0", False
        if name == b"transfer-encoding":
            return True, True
    return False, False


class HttpForwarder:
    """Forwards HTTP requests through one keep-alive connection pool."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._timers = CoarseTimers(resolution=0.1)

    async def forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        upstream: Upstream,
        *,
        as_json: bool,
        fallback: bool = False,
    ) -> bool:
        """Carry one exchange; True when the client has been answered.

        With ``fallback``, an app that could not even be connected to (not a byte of the
        request sent, the body not read) is not answered for: False comes back and the
        caller may send the request elsewhere (the inference frontend's retry).
        """
        has_body, chunked = _body_framing(scope)
        watch = _DisconnectWatch(receive, self._timers, body_pending=has_body)
        body = _RequestBody(receive, watch) if has_body else None
        watch.want_later(_WATCH_AFTER)  # a long wait for the answer (long polling) is watched
        try:
            try:
                response = await self._request(scope, upstream, body, chunked)
            except UpstreamUnavailable as exc:
                if body is not None and body.disconnected:
                    return True
                upstream.meter.failed()
                if fallback and exc.nothing_sent:
                    return False
                log.info("app at %s not answering: %s", upstream.origin, exc)
                page = APP_TIMED_OUT if isinstance(exc, UpstreamTimeout) else APP_NOT_ANSWERING
                await send_page(send, page, as_json=as_json)
                return True
            await self._relay(response, send, upstream, watch)
        except asyncio.CancelledError:
            if watch.caused():
                return True  # the client left; the exchange with the app went with it
            raise
        finally:
            watch.stop()
        return True

    async def _request(
        self,
        scope: Scope,
        upstream: Upstream,
        body: _RequestBody | None,
        chunked: bool,
    ) -> Response:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            response = await self._pool.request(
                scope["method"].encode("ascii"),
                Origin.parse(upstream.origin),
                upstream.target.encode("latin-1"),
                upstream.headers,
                body.chunks() if body is not None else None,
                chunked=chunked,
            )
        except ValueError as exc:
            raise UpstreamUnavailable(str(exc)) from exc
        upstream.meter.responded(loop.time() - started, response.status)
        return response

    async def _relay(
        self, response: Response, send: Send, upstream: Upstream, watch: _DisconnectWatch
    ) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": response_headers(response.headers),
                }
            )
            while True:
                try:
                    chunk = await response.read()
                except UpstreamBroken as exc:
                    upstream.meter.failed()
                    log.info("app at %s broke off: %s", upstream.origin, exc)
                    raise  # the server drops the client connection: a cut body must show
                more = not response.at_eof
                if more:
                    watch.want()  # a stream: it may run for hours, the client may leave
                else:
                    watch.finishing = True
                await send({"type": "http.response.body", "body": chunk, "more_body": more})
                if not more:
                    break
                upstream.meter.traffic()
        except BaseException:
            response.close()
            raise
        response.release()
