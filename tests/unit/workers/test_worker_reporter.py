"""The event reporter rides out a Redis outage: events wait, then arrive, none lost."""

from __future__ import annotations

from typing import Any

import redis.exceptions

from contract.messages import KernelEvent
from workers.reporter import EventReporter


class FlakyPool:
    """Refuses the first *failures* enqueues the way redis-py does when Redis is down."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.jobs: list[dict[str, Any]] = []

    async def enqueue_job(self, name: str, batch: dict[str, Any], **_: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379.")
        self.jobs.append(batch)


async def test_events_reported_while_redis_is_down_arrive_once_it_is_back() -> None:
    pool = FlakyPool(failures=3)
    reporter = EventReporter(pool, linger_s=0.0)  # type: ignore[arg-type]
    reporter.start()
    try:
        reporter.report(
            KernelEvent(kind="exited", kernel_id="k", session_id="s", node_id="n", ts=0.0)
        )
        assert await reporter.flush(timeout=10)
    finally:
        await reporter.close()
    assert [e["kind"] for job in pool.jobs for e in job["events"]] == ["exited"]
    assert pool.failures == 0
