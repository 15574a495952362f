"""The FastAPI application: ``create_app(settings)``.

::

    client ─▶ BodyLimit ─▶ FastAPI routes (/v1/sessions, /v1/nodes, /v1/users, ...)
                               │ services own transactions
                               ▼
                      SQLAlchemy (PostgreSQL | SQLite)      Redis: arq queues, live streams
    workers ─▶ events queue ─▶ EventHandler (in this process, unless run_events=False)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, generate_latest

from contract import arq as queue
from contract.version import VERSION
from gateway import console
from gateway.api import openapi, problems
from gateway.api.routes import (
    apps,
    blobs,
    endpoints,
    folders,
    groups,
    health,
    images,
    internal,
    logs,
    nodes,
    policies,
    projects,
    sessions,
    templates,
    triggers,
    users,
    webhooks,
)
from gateway.auth import KeyCache
from gateway.config import GatewaySettings
from gateway.consumer import events_worker
from gateway.db.engine import create_engine, create_session_factory
from gateway.events import EventHandler
from gateway.metrics import CONTENT_TYPE, ConsumerMetrics, HttpMetrics, MetricsMiddleware
from gateway.queue import connect
from gateway.services.blobs import BlobStore, blob_gc_loop
from gateway.services.folderfs import FolderFS
from gateway.services.folders import FolderService, upload_gc_loop
from gateway.services.hooks import HookService
from gateway.services.logs import LogService
from gateway.services.sessions import SessionService
from gateway.services.templates import TemplateService
from gateway.services.webhooks import WebhookService
from gateway.state import AppState
from gateway.webhooks import Deliverer

__all__ = ["create_app"]

log = logging.getLogger(__name__)
MAX_BODY = 8 * 1024 * 1024


def create_app(settings: GatewaySettings | None = None, *, run_events: bool = True) -> FastAPI:
    settings = settings or GatewaySettings()
    blob_store = BlobStore(settings.effective_storage_root, settings.max_blob_bytes)
    registry = CollectorRegistry()  # one per app: tests run several in one process
    consumer_metrics = ConsumerMetrics(registry)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(settings.effective_database_url)
        db = create_session_factory(engine)
        pool = await connect(settings.redis_url)
        folder_service = FolderService(
            db, FolderFS(settings.effective_folders_root, settings.folders_uid)
        )
        sessions_ = SessionService(db, pool, settings, blob_store, folder_service)
        templates_ = TemplateService(db, sessions_)
        state = AppState(
            settings=settings,
            engine=engine,
            db=db,
            pool=pool,
            keys=KeyCache(settings.api_key_cache_s),
            sessions=sessions_,
            logs=LogService(db, pool, settings.max_log_bytes),
            blobs=blob_store,
            templates=templates_,
            hooks=HookService(db, templates_),
            webhooks=WebhookService(db, settings),
            folders=folder_service,
        )
        app.state.jobgate = state
        consumer = None
        task = None
        if run_events:
            handler = EventHandler(db, pool)
            consumer = events_worker(
                settings.redis_url, handler, handle_signals=False, metrics=consumer_metrics
            )
            task = asyncio.create_task(queue.run(consumer))
        gc = uploads_gc = None
        if settings.blob_gc_interval_s:
            gc = asyncio.create_task(
                blob_gc_loop(blob_store, db, settings.blob_gc_interval_s, settings.blob_gc_grace_s)
            )
            uploads_gc = asyncio.create_task(
                upload_gc_loop(folder_service.fs, settings.blob_gc_interval_s)
            )
        deliverer = Deliverer(db, settings) if settings.webhook_deliverer else None
        delivering = asyncio.create_task(deliverer.run()) if deliverer is not None else None
        try:
            yield
        finally:
            if delivering is not None and deliverer is not None:
                delivering.cancel()
                await asyncio.gather(delivering, return_exceptions=True)
                await deliverer.close()
            for loop in (gc, uploads_gc):
                if loop is not None:
                    loop.cancel()
                    await asyncio.gather(loop, return_exceptions=True)
            if task is not None and consumer is not None:
                await queue.stop(consumer, task)
            await pool.aclose()
            await engine.dispose()

    app = FastAPI(
        title="jobgate",
        version=VERSION,
        summary="A serverless job gateway for GPU clusters.",
        lifespan=lifespan,
    )
    problems.install(app)
    openapi.install(app, settings)
    routers = (
        health,
        sessions,
        logs,
        apps,
        nodes,
        images,
        users,
        projects,
        policies,
        groups,
        internal,
        blobs,
        endpoints,
        templates,
        triggers,
        webhooks,
        folders,
    )
    for module in routers:
        responses = None if module is health else problems.PROBLEM_RESPONSES
        app.include_router(module.router, responses=responses)
    console.install(app)  # the web console: /, /sign-in, /sessions/{id}, /nodes, /admin
    app.add_middleware(
        problems.BodyLimit,
        limit=MAX_BODY,
        prefixes=(
            ("/v1/blobs/", settings.max_blob_bytes),
            ("/v1/hooks/", settings.max_hook_bytes),
            ("/v1/uploads/", 2**62),
        ),
    )

    async def metrics(request: Request) -> Response:
        """Prometheus text: requests, latency, and the event consumer (gateway/metrics.py)."""
        state: AppState = request.app.state.jobgate
        try:
            await consumer_metrics.refresh(state.pool)
        except Exception as exc:  # Redis away: still serve what this process knows
            log.warning("metrics: cannot read the events queue: %s", exc)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE)

    app.add_route("/metrics", metrics, include_in_schema=False)
    app.add_middleware(MetricsMiddleware, metrics=HttpMetrics(registry))  # outermost
    return app
