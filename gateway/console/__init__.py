"""The web console: server-rendered pages served by the gateway, same origin as ``/v1``.

See ``README.md`` beside this file for the picture and ``docs/console.md`` for why.
``install(app)`` mounts the pages and the static files.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

__all__ = ["install"]

STATIC = Path(__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Mount the console's pages (``/``, ``/sign-in`` ...) and ``/console/static``; a
    browser's 404 outside ``/v1`` is the console's page (status handlers come first)."""
    from gateway.console import pages, sso  # the pages import the API's dependencies

    app.include_router(pages.router)
    app.include_router(sso.router)
    app.add_exception_handler(404, pages.not_found)
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
