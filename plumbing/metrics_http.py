"""A Prometheus ``GET /metrics`` listener on a port of its own, for the processes that
have no HTTP app to put it on (the scheduler, each worker). The gateway and the app
proxy serve theirs on their own apps.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

__all__ = ["MetricsListener"]

log = logging.getLogger(__name__)


class MetricsListener:
    """``start(host, port)`` serves *render* at ``/metrics``; a port of None serves
    nothing; a port that cannot be had raises *error* naming *what*, host and port."""

    def __init__(
        self,
        what: str,
        render: Callable[[], Awaitable[bytes]],
        content_type: str,
        error: type[Exception] = RuntimeError,
    ) -> None:
        self.what = what
        self.render = render
        self.content_type = content_type
        self.error = error
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int | None) -> None:
        if port is None:
            return
        app = web.Application()
        app.router.add_get("/metrics", self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            await runner.cleanup()
            raise self.error(
                f"{self.what}: cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None
        self._runner = runner
        log.info("%s on http://%s:%d/metrics", self.what, host, port)

    async def _handle(self, request: web.Request) -> web.Response:
        return web.Response(body=await self.render(), headers={"Content-Type": self.content_type})

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
