"""The arq worker that consumes the events queue inside a gateway process.

A batch that fails because the database or Redis is unreachable (a restart, a
failover) is tried again later, not dropped: arq gives up on a job that raises, and a
lost "exited" would leave its session RUNNING for ever. Handling a batch twice is safe
(gateway/loops/events.py).

A job whose id names a node (``e:{node}:…``) was written by that node's own Redis user
(only it may write such ids, :mod:`contract.acl`): the gateway takes from it only what
concerns that node. Any id but those and ``events:…`` (the shared login's) is removed
unread: a node may add ids to this queue, and arq would run, or delete the keys of,
another queue's job under that id.
"""

from __future__ import annotations

from typing import Any

from arq.worker import Retry, Worker, func

from contract.keys import EVENTS_QUEUE, event_job_node, is_events_job
from contract.messages import EventBatch
from gateway.db.engine import unavailable
from gateway.loops.events import EventHandler
from gateway.metrics import ConsumerMetrics
from plumbing.arq import make_worker

__all__ = ["events_worker"]

#: a batch is tried this often while the database or Redis is down (about 8 minutes)
MAX_TRIES = 100


def _retry_in(tries: int) -> float:
    return float(min(5.0, 0.25 * 2 ** max(0, tries - 1)))


async def handle_events(ctx: dict[str, Any], batch: dict[str, Any]) -> None:
    handler: EventHandler = ctx["events"]
    metrics: ConsumerMetrics | None = ctx.get("metrics")
    parsed = EventBatch.model_validate(batch)
    try:
        await handler.handle(parsed, event_job_node(str(ctx.get("job_id", ""))))
    except BaseException as exc:
        if metrics is not None:
            metrics.handled(len(parsed.events), ok=False)
        if isinstance(exc, Exception) and unavailable(exc):
            raise Retry(defer=_retry_in(int(ctx.get("job_try", 1)))) from exc
        raise
    if metrics is not None:
        metrics.handled(len(parsed.events), ok=True)


def events_worker(
    redis_url: str,
    handler: EventHandler,
    *,
    handle_signals: bool,
    metrics: ConsumerMetrics | None = None,
) -> Worker:
    """Built inside a running loop (arq binds to the current one)."""
    return make_worker(
        redis_url,
        EVENTS_QUEUE,
        [func(handle_events, name="handle_events", max_tries=MAX_TRIES)],
        max_jobs=16,
        # a gateway killed mid-batch leaves the batch "in progress" this long + 10 s
        # before another consumer takes it again
        job_timeout=30,
        handle_signals=handle_signals,
        ctx={"events": handler, "metrics": metrics},
        accept=is_events_job,
    )
