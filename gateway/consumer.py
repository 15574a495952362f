"""The arq worker that consumes the events queue inside a gateway process."""

from __future__ import annotations

from typing import Any

from arq.connections import RedisSettings
from arq.worker import Worker, func

from gateway.events import EventHandler
from workers.messages import EVENTS_QUEUE, EventBatch
from workers.queue import json_deserializer, json_serializer

__all__ = ["events_worker"]


async def handle_events(ctx: dict[str, Any], batch: dict[str, Any]) -> None:
    handler: EventHandler = ctx["events"]
    await handler.handle(EventBatch.model_validate(batch))


def events_worker(redis_url: str, handler: EventHandler, *, handle_signals: bool) -> Worker:
    """Built inside a running loop (arq binds to the current one)."""
    return Worker(
        functions=[func(handle_events, name="handle_events", max_tries=5)],
        queue_name=EVENTS_QUEUE,
        redis_settings=RedisSettings.from_dsn(redis_url),
        job_serializer=json_serializer,
        job_deserializer=json_deserializer,
        handle_signals=handle_signals,
        max_jobs=16,
        keep_result=0,
        poll_delay=0.02,
        job_timeout=60,
        ctx={"events": handler},
        log_results=False,
    )
