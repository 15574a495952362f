"""The arq worker that consumes the events queue inside a gateway process."""

from __future__ import annotations

from typing import Any

from arq.worker import Worker, func

from contract.arq import make_worker
from contract.keys import EVENTS_QUEUE
from contract.messages import EventBatch
from gateway.events import EventHandler
from gateway.metrics import ConsumerMetrics

__all__ = ["events_worker"]


async def handle_events(ctx: dict[str, Any], batch: dict[str, Any]) -> None:
    handler: EventHandler = ctx["events"]
    metrics: ConsumerMetrics | None = ctx.get("metrics")
    parsed = EventBatch.model_validate(batch)
    try:
        await handler.handle(parsed)
    except BaseException:
        if metrics is not None:
            metrics.handled(len(parsed.events), ok=False)
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
        [func(handle_events, name="handle_events", max_tries=5)],
        max_jobs=16,
        job_timeout=60,
        handle_signals=handle_signals,
        ctx={"events": handler, "metrics": metrics},
    )
