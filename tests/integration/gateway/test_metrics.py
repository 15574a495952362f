"""The gateway's and the scheduler's /metrics, scraped from a real stack with real traffic."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
from harness import Stack, free_port
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis
from waiting import until

from gateway.metrics import queue_depth_and_lag

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def labelled(samples: Samples, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (n, labels) in samples if n == name]


async def wait_reason(stack: Stack, session_id: str) -> None:
    """Until a scheduling pass has said why the session waits."""

    async def judged() -> bool:
        session = await stack.get(session_id)
        return bool(session["pending_reason"] != "waiting for the scheduler")

    await until(judged, timeout=30, what="a pass looked at the session")


async def scrape(url: str) -> tuple[str, Samples]:
    async with httpx.AsyncClient() as http:
        r = await http.get(url)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    return r.text, parse(r.text)


async def test_gateway_scheduler_and_consumer_metrics_follow_real_traffic(stack: Stack) -> None:
    port = free_port()
    stack.settings.scheduler_metrics_port = port
    await stack.stop_schedulers()
    stack.start_scheduler()
    await stack.start_worker("n1")

    ok = await stack.submit(command=["sh", "-c", "echo hi"], resources={"cpu": "0.1"})
    # a label no node has: it waits (a size no node has would be refused at submit)
    stuck = await stack.submit(command=["true"], constraints={"zone": "mars"})
    await stack.wait_status(ok["id"], {"SUCCEEDED"})
    await wait_reason(stack, stuck["id"])
    async with stack.client() as api:
        for _ in range(3):
            assert (await api.get(f"/v1/sessions/{stuck['id']}")).status_code == 200
        missing = uuid.uuid4()
        assert (await api.get(f"/v1/sessions/{missing}")).status_code == 404
        assert (await api.get(f"/no/such/path/{missing}")).status_code == 404
        assert (await api.post("/v1/sessions", json={"command": 3})).status_code == 422

    # -- the gateway: by route template and status, never by raw path -----------------
    text, got = await scrape(f"{stack.url}/metrics")
    for _ in range(100):  # the batch is counted just after its transaction committed
        if value(got, "jobgate_consumer_events_total") >= 2:
            break
        await asyncio.sleep(0.05)
        text, got = await scrape(f"{stack.url}/metrics")
    requests = "jobgate_gateway_requests_total"
    one = "/v1/sessions/{session_id}"
    assert value(got, requests, method="POST", route="/v1/sessions", status="201") == 2
    assert value(got, requests, method="POST", route="/v1/sessions", status="422") == 1
    assert value(got, requests, method="GET", route=one, status="200") >= 3
    assert value(got, requests, method="GET", route=one, status="404") == 1
    assert value(got, requests, method="GET", route="unmatched", status="404") == 1
    assert str(missing) not in text
    assert stuck["id"] not in text
    count = "jobgate_gateway_request_duration_seconds_count"
    assert value(got, count, method="GET", route=one) >= 4
    inf = value(
        got, "jobgate_gateway_request_duration_seconds_bucket", method="GET", route=one, le="+Inf"
    )
    assert inf == value(got, count, method="GET", route=one)
    # -- the event consumer, in the gateway process -------------------------------------
    assert value(got, "jobgate_consumer_batches_total", outcome="ok") >= 1
    assert value(got, "jobgate_consumer_batches_total", outcome="failed") == 0
    assert value(got, "jobgate_consumer_events_total") >= 2  # running, exited
    assert ("jobgate_consumer_queue_depth", frozenset()) in got
    assert value(got, "jobgate_consumer_lag_seconds") >= 0

    # -- the scheduler, on its own port -------------------------------------------------
    _, sched = await scrape(f"http://127.0.0.1:{port}/metrics")
    group = {"resource_group": "default"}
    assert value(sched, "jobgate_scheduler_placements_total", **group) == 1
    assert value(sched, "jobgate_scheduler_passes_total", outcome="ok", **group) >= 1
    assert value(sched, "jobgate_scheduler_passes_total", outcome="failed", **group) == 0
    assert value(sched, "jobgate_scheduler_pass_duration_seconds_count", **group) >= 1
    waiting = labelled(sched, "jobgate_scheduler_pending_sessions")
    assert waiting == [{"resource_group": "default", "reason": "unschedulable"}]
    assert value(sched, "jobgate_scheduler_pending_sessions", reason="unschedulable", **group) == 1
    assert ("jobgate_scheduler_queue_depth", frozenset()) in sched


async def test_queue_lag_is_the_age_of_the_oldest_waiting_job(redis_url: str) -> None:
    queue = f"jobgate:test:lag:{uuid.uuid4()}"
    redis = Redis.from_url(redis_url)
    try:
        assert await queue_depth_and_lag(redis, queue) == (0, 0.0)
        now_ms = time.time() * 1000
        await redis.zadd(queue, {"old": now_ms - 90_000, "new": now_ms - 1_000})
        depth, lag = await queue_depth_and_lag(redis, queue)
        assert depth == 2
        assert 90 <= lag < 3600  # the oldest one, not the newest
        await redis.delete(queue)
        await redis.zadd(queue, {"deferred": now_ms + 60_000})
        assert await queue_depth_and_lag(redis, queue) == (1, 0.0)
    finally:
        await redis.delete(queue)
        await redis.aclose()
