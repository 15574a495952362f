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
import time
from collections.abc import AsyncIterator, Awaitable

from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, generate_latest
from redis.exceptions import RedisError

from contract.folders import STALE_UPLOAD_S
from contract.version import VERSION
from gateway import console
from gateway.api import openapi, problems
from gateway.api.audit import AuditMiddleware
from gateway.api.routes import (
    apps,
    audit,
    auth,
    blobs,
    budgets,
    endpoints,
    folders,
    groups,
    health,
    images,
    internal,
    keys,
    logs,
    nodes,
    policies,
    projects,
    secrets,
    sessions,
    templates,
    triggers,
    usage,
    users,
    webhooks,
)
from gateway.auth import KeyCache
from gateway.config import GatewaySettings
from gateway.db.engine import SessionFactory, create_engine, create_session_factory, dispose
from gateway.domain.retry import Backoff
from gateway.domain.sealing import MasterKey
from gateway.loops.consumer import events_worker
from gateway.loops.deliverer import Deliverer
from gateway.loops.events import EventHandler
from gateway.loops.pruning import FINISH_S, RETENTION_EVERY_S, repeat
from gateway.metrics import (
    CONTENT_TYPE,
    USAGE_SECONDS,
    ConsumerMetrics,
    HttpMetrics,
    MetricsMiddleware,
)
from gateway.queue import connect
from gateway.services.audit import prune_audit
from gateway.services.blobs import BlobStore, collect_garbage
from gateway.services.folderfs import FolderFS
from gateway.services.folders import FolderService
from gateway.services.hooks import HookService, prune_deliveries
from gateway.services.logs import LogService
from gateway.services.oidc import OidcService
from gateway.services.redis_users import RedisUsersUnusable
from gateway.services.secrets import SecretService
from gateway.services.sessions import SessionService
from gateway.services.templates import TemplateService
from gateway.services.webhooks import WebhookService
from gateway.state import AppState
from plumbing import arq as queue

__all__ = ["create_app"]

log = logging.getLogger(__name__)
MAX_BODY = 8 * 1024 * 1024


def create_app(settings: GatewaySettings | None = None, *, run_events: bool = True) -> FastAPI:
    settings = settings or GatewaySettings()
    blob_store = BlobStore(settings.effective_storage_root, settings.max_blob_bytes)
    configured = settings.effective_secrets_key  # a bad key is an error at start
    secret_key = MasterKey.from_base64(configured) if configured else None
    registry = CollectorRegistry()  # one per app: tests run several in one process
    consumer_metrics = ConsumerMetrics(registry)
    registry.register(USAGE_SECONDS)  # the event consumer closes usage records

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(settings.effective_database_url)
        db = create_session_factory(engine)
        pool = await connect(settings.redis_url, wait=True)
        folder_service = FolderService(
            db, FolderFS(settings.effective_folders_root, settings.folders_uid)
        )
        secret_service = SecretService(db, secret_key)
        sessions_ = SessionService(
            db, pool, settings, blob_store, folder_service, secrets=secret_service
        )
        templates_ = TemplateService(db, sessions_)
        keys = KeyCache(settings.api_key_cache_s)
        state = AppState(
            settings=settings,
            engine=engine,
            db=db,
            pool=pool,
            keys=keys,
            sessions=sessions_,
            logs=LogService(db, pool, settings.max_log_bytes, secret_service),
            blobs=blob_store,
            templates=templates_,
            hooks=HookService(db, templates_),
            webhooks=WebhookService(db, settings),
            folders=folder_service,
            secrets=secret_service,
            oidc=OidcService(db, keys, secret_key, pool, key_ttl_s=settings.oidc_key_ttl_s),
        )
        app.state.jobgate = state
        if settings.redis_users:  # this Redis and the gateway's login can hold them
            await _check_redis_users(state)
        stop_keeping = asyncio.Event()
        keeping = asyncio.create_task(state.redis_users.keep(stop_keeping))
        consumer = None
        task = None
        if run_events:
            backoff = Backoff(settings.retry_backoff_s, settings.retry_backoff_max_s)
            handler = EventHandler(db, pool, backoff)
            consumer = events_worker(
                settings.redis_url, handler, handle_signals=False, metrics=consumer_metrics
            )
            task = asyncio.create_task(queue.run(consumer))
        pruning = _pruning_loops(settings, db, blob_store, folder_service.fs)
        deliverer = Deliverer(db, settings) if settings.webhook_deliverer else None
        stop_delivering = asyncio.Event()
        delivering = (
            asyncio.create_task(deliverer.run(stop_delivering)) if deliverer is not None else None
        )
        try:
            yield
        finally:
            if delivering is not None and deliverer is not None:
                # the round under way ends first: one cancelled inside a database call
                # can leave its connection's socket open (asyncpg #1156)
                stop_delivering.set()
                _, late = await asyncio.wait({delivering}, timeout=FINISH_S)
                for round_ in late:
                    round_.cancel()
                await asyncio.gather(delivering, return_exceptions=True)
                await deliverer.close()
            stop_keeping.set()
            await keeping
            for loop in pruning:
                loop.cancel()
            await asyncio.gather(*pruning, return_exceptions=True)
            await state.audit.close()
            if task is not None and consumer is not None:
                await queue.stop(consumer, task)
            await pool.aclose()
            await dispose(engine)

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
        keys,
        projects,
        policies,
        budgets,
        groups,
        internal,
        blobs,
        endpoints,
        templates,
        triggers,
        webhooks,
        folders,
        secrets,
        usage,
        audit,
        auth,
    )
    for module in routers:
        responses = None if module is health else problems.PROBLEM_RESPONSES
        app.include_router(module.router, responses=responses)
    console.install(app)  # the web console: /, /sign-in, /sessions/{id}, /endpoints ...
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
    app.add_middleware(AuditMiddleware)  # outside BodyLimit: its 413s are recorded too
    app.add_middleware(MetricsMiddleware, metrics=HttpMetrics(registry))  # outermost
    return app


async def _check_redis_users(state: AppState) -> None:
    """With JOBGATE_REDIS_USERS: refuse to start on a Redis that cannot hold the users (a
    clear line in the log); a Redis not reachable yet is left to the check loop."""
    try:
        await state.redis_users.check()
        await state.redis_users.make_proxy()  # the proxy secret may have changed
        await state.redis_users.restore()
    except RedisUsersUnusable as exc:
        log.error("%s", exc)
        raise
    except (OSError, RedisError) as exc:
        log.warning("Redis users not checked at start (%s); the check loop goes on", exc)


def _pruning_loops(
    settings: GatewaySettings, db: SessionFactory, blob_store: BlobStore, fs: FolderFS
) -> list[asyncio.Task[None]]:
    """Every gateway process prunes: unreferenced blobs and abandoned folder uploads each
    ``blob_gc_interval_s`` (0: never), hook deliveries and audit rows past their
    retention each minute."""
    loops: list[asyncio.Task[None]] = []
    if every := settings.blob_gc_interval_s:

        async def collect_blobs() -> int:
            return len(await collect_garbage(blob_store, db, settings.blob_gc_grace_s))

        def stale_uploads() -> Awaitable[int]:
            return asyncio.to_thread(fs.remove_stale_uploads, time.time(), STALE_UPLOAD_S)

        loops.append(asyncio.create_task(repeat(collect_blobs, every, "unreferenced blob(s)")))
        loops.append(
            asyncio.create_task(
                repeat(stale_uploads, every, "abandoned folder upload(s)", errors=(OSError,))
            )
        )
    if (days := settings.hook_delivery_retention_days) > 0:
        loops.append(
            asyncio.create_task(
                repeat(
                    lambda: prune_deliveries(db, days),
                    RETENTION_EVERY_S,
                    f"hook deliveries older than {days:g} days",
                    at_once=True,
                )
            )
        )
    if (audit_days := settings.audit_retention_days) > 0:
        loops.append(
            asyncio.create_task(
                repeat(
                    lambda: prune_audit(db, audit_days),
                    RETENTION_EVERY_S,
                    f"audit rows older than {audit_days:g} days",
                    at_once=True,
                )
            )
        )
    return loops
