"""The scheduler process (``jobgate scheduler run``, also what ``jobgate up`` starts): it
composes the loops it hosts around an arq worker on the scheduler queue.

* ``schedule(group)`` jobs, coalesced by job id ``schedule:{group}``, run passes while
  new work keeps arriving;
* a cron ``tick`` every ``tick_interval_s`` runs a pass for every group with pending
  sessions (start times that passed, anything a lost request missed), the reconciler,
  and every ``budget_check_s`` the budget watcher (``gateway.loops.budgets``);
* the inference endpoint controller's loop (``gateway.loops.endpoint_controller``; one leader
  among all scheduler processes, by a Redis lease).

Several schedulers may run at once: the plan applier's row locks keep them from ever
over-committing a node.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from arq.cron import cron
from arq.worker import func

from contract.keys import SCHEDULER_QUEUE
from gateway.config import GatewaySettings
from gateway.db.engine import create_engine, create_session_factory, dispose
from gateway.loops.budgets import BudgetWatcher
from gateway.loops.endpoint_controller import EndpointController
from gateway.loops.reconciler import Reconciler
from gateway.metrics import MetricsServer, SchedulerMetrics
from gateway.queue import connect
from gateway.scheduler.service import Scheduler
from plumbing import arq as queue
from plumbing.arq import make_worker

__all__ = ["run_scheduler"]

log = logging.getLogger(__name__)


async def schedule(ctx: dict[str, Any], resource_group: str) -> None:
    scheduler: Scheduler = ctx["scheduler"]
    await scheduler.run_requested(resource_group)


async def tick(ctx: dict[str, Any]) -> None:
    scheduler: Scheduler = ctx["scheduler"]
    reconciler: Reconciler = ctx["reconciler"]
    try:
        await reconciler.run()
    except Exception:
        log.exception("reconciler run failed; the next tick retries")
    budgets: BudgetWatcher = ctx["budgets"]
    try:
        await budgets.run_due()
    except Exception:
        log.exception("budget check failed; the next tick retries")
    for group in await scheduler.groups_with_pending():
        await scheduler.run_requested(group)


def _tick_seconds(interval: float) -> set[int]:
    step = max(1, min(30, round(interval)))
    return set(range(0, 60, step))


async def run_scheduler(settings: GatewaySettings, *, handle_signals: bool = True) -> None:
    engine = create_engine(settings.effective_database_url)
    db = create_session_factory(engine)
    pool = await connect(settings.redis_url, wait=True)
    metrics = SchedulerMetrics()
    server = MetricsServer(metrics, pool)
    await server.start(settings.scheduler_metrics_host, settings.scheduler_metrics_port)
    ctx = {
        "scheduler": Scheduler(db, pool, settings, metrics),
        "reconciler": Reconciler(db, pool, settings),
        "budgets": BudgetWatcher(db, settings, pool),
    }
    worker = make_worker(
        settings.redis_url,
        SCHEDULER_QUEUE,
        [func(schedule, name="schedule", max_tries=3)],
        cron_jobs=[
            cron(
                tick,
                second=_tick_seconds(settings.tick_interval_s),
                run_at_startup=True,
                timeout=60,
            )
        ],
        max_jobs=8,
        job_timeout=120,
        handle_signals=handle_signals,
        ctx=ctx,
    )
    main = asyncio.ensure_future(queue.run(worker))
    # inference endpoints: every scheduler process runs the loop, the lease holder acts
    controller = EndpointController(db, pool, settings)
    endpoints = asyncio.create_task(controller.run())
    try:
        await asyncio.shield(main)
    except asyncio.CancelledError:
        pass
    finally:
        controller.stop()
        try:
            await asyncio.wait_for(asyncio.shield(endpoints), 10)
        except (TimeoutError, asyncio.CancelledError):
            endpoints.cancel()
            await asyncio.gather(endpoints, return_exceptions=True)
        await queue.stop(worker, main)
        await server.close()
        await pool.aclose()
        await dispose(engine)
