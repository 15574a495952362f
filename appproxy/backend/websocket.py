"""Forward a WebSocket: handshake with the app first, then carry frames both ways.

    client ══ websocket.connect ══▶ proxy ── ws_connect(subprotocols, headers) ──▶ app
           ◀═ accept(app's subprotocol) ═╡
           ◀══════ text / binary frames, both ways, one task per direction ══════▶
           ◀═ close(code, reason) from either side is passed to the other ══════▶

The client is accepted only once the app has accepted, with the subprotocol the app
chose, so a refusing or absent app is reported as an HTTP answer (502 page, or the app's
own 4xx status) rather than as an open-then-closed socket. Close codes travel end to
end; codes that may not appear on the wire (1005, 1006) become 1000 / 1001, and a lost
app connection closes the client with 1011.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

import aiohttp
from yarl import URL

from appproxy.asgi import Receive, Scope, Send
from appproxy.backend.upstream import Meter, Upstream
from appproxy.pages import APP_NOT_ANSWERING, Page, deny_websocket

__all__ = ["WebSocketForwarder", "wire_code"]

log = logging.getLogger(__name__)

_WIRE_CODES: Final = frozenset(
    {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014}
)
_APP_LOST: Final = 1011
_NO_CLOSE_TIMEOUT: Final = aiohttp.ClientWSTimeout(ws_receive=None, ws_close=10.0)
# Errors that only mean one side went away: the other side is closed, nothing to report.
_GONE: Final = (OSError, aiohttp.ClientError, asyncio.CancelledError)


def wire_code(code: int | None, fallback: int = 1000) -> int:
    """``code`` if a close frame may carry it, else ``fallback``.

    >>> wire_code(4321), wire_code(1005), wire_code(1006, 1001)
    (4321, 1000, 1001)
    """
    if code is not None and (code in _WIRE_CODES or 3000 <= code <= 4999):
        return code
    return fallback


class WebSocketForwarder:
    """Forwards WebSocket sessions through the same pooled aiohttp session as HTTP."""

    def __init__(self, session: aiohttp.ClientSession, *, max_size: int) -> None:
        self._session = session
        self._max_size = max_size

    async def forward(
        self, scope: Scope, receive: Receive, send: Send, upstream: Upstream, *, as_json: bool
    ) -> None:
        """Carry one WebSocket; the client's ``websocket.connect`` has been received."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            ws = await self._session.ws_connect(
                URL(upstream.url, encoded=True),
                protocols=scope.get("subprotocols") or (),
                headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in upstream.headers],
                max_msg_size=self._max_size,
                compress=0,
                timeout=_NO_CLOSE_TIMEOUT,
                autoping=True,
                autoclose=True,
            )
        except aiohttp.WSServerHandshakeError as exc:
            await deny_websocket(scope, send, _refused(exc.status), as_json=as_json)
            return
        except (aiohttp.ClientError, TimeoutError) as exc:
            upstream.meter.failed()
            log.info("app not answering a WebSocket: %s", type(exc).__name__)
            await deny_websocket(scope, send, APP_NOT_ANSWERING, as_json=as_json)
            return
        upstream.meter.responded(loop.time() - started, 101)
        try:
            await send({"type": "websocket.accept", "subprotocol": ws.protocol})
            await _Bridge(ws, receive, send, upstream.meter).run()
        finally:
            await ws.close()


def _refused(status: int) -> Page:
    if 400 <= status < 500:
        detail = f"The app refused this WebSocket connection (HTTP {status})."
        return Page(status, "app-refused-websocket", "The app refused the connection", detail)
    return APP_NOT_ANSWERING


class _Bridge:
    """One task per direction; whichever ends first ends the other, and both sides close."""

    def __init__(
        self, ws: aiohttp.ClientWebSocketResponse, receive: Receive, send: Send, meter: Meter
    ) -> None:
        self._ws = ws
        self._receive = receive
        self._send = send
        self._meter = meter
        self._client_done = False  # the client disconnected, or we sent it a close

    async def run(self) -> None:
        to_app = asyncio.create_task(self._client_to_app())
        tasks = [asyncio.create_task(self._app_to_client()), to_app]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if self._client_done and to_app not in done:
                await asyncio.wait([to_app])  # let it finish the closing handshake with the app
        finally:
            for task in tasks:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        if not self._client_done:  # the app's side failed first: tell the client
            self._meter.failed()
            with contextlib.suppress(OSError):
                await self._close_client(_APP_LOST, "the app's connection was lost")
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, _GONE):
                raise result

    async def _close_client(self, code: int, reason: str) -> None:
        self._client_done = True
        await self._send({"type": "websocket.close", "code": code, "reason": reason})

    async def _client_to_app(self) -> None:
        ws, meter = self._ws, self._meter
        while True:
            message = await self._receive()
            kind = message["type"]
            if kind == "websocket.receive":
                data = message.get("bytes")
                if data is not None:
                    await ws.send_bytes(data)
                else:
                    await ws.send_str(message.get("text") or "")
                meter.traffic()
            elif kind == "websocket.disconnect":
                self._client_done = True
                reason = (message.get("reason") or "").encode()
                await ws.close(code=wire_code(message.get("code"), 1001), message=reason)
                return

    async def _app_to_client(self) -> None:
        ws, send, meter = self._ws, self._send, self._meter
        while True:
            message = await ws.receive()
            kind = message.type
            if kind is aiohttp.WSMsgType.TEXT:
                await send({"type": "websocket.send", "text": message.data})
            elif kind is aiohttp.WSMsgType.BINARY:
                await send({"type": "websocket.send", "bytes": message.data})
            elif kind is aiohttp.WSMsgType.CLOSE:
                await self._close_client(wire_code(message.data), message.extra or "")
                return
            else:  # CLOSING (we close it: the client left), CLOSED or ERROR (app lost)
                return
            meter.traffic()
