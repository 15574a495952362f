"""Preemption through the real gateway on PostgreSQL, with real processes that get the
notice, their SIGTERM and their grace period (docs/fair-share.md, Preemption)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import asyncpg
import pytest
from harness import TERMINAL, Stack

#: a job that checkpoints on SIGTERM: it prints its notice file, then exits 0 (and ends by
#: itself after 5 minutes: a process-runtime kernel outlives its worker)
VICTIM = """
import os, signal, sys, time
notice = os.path.join(os.environ["HOME"], ".jobgate", "preempted")
def term(*_):
    print(open(notice).read() if os.path.exists(notice) else "no notice", flush=True)
    print("checkpointed", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("started", flush=True)
end = time.monotonic() + 300
while time.monotonic() < end:
    time.sleep(0.05)
"""


def _job(cpu: str, priority: int, **more: Any) -> dict[str, Any]:
    return {
        "command": ["python3", "-c", VICTIM],
        "resources": {"cpu": cpu, "mem": "64m"},
        "priority": priority,
    } | more


async def _put_group(stack: Stack, scheduler: dict[str, Any]) -> None:
    async with stack.client() as api:
        r = await api.put("/v1/resource-groups/default", json={"scheduler": scheduler})
        assert r.status_code < 300, r.text


@pytest.fixture(autouse=True)
async def _end_every_session(stack: Stack) -> AsyncIterator[None]:
    """Stop what a test left running: process-runtime kernels outlive their worker."""
    yield
    async with stack.client() as api:
        listed = (await api.get("/v1/sessions", params={"all": "true", "limit": 500})).json()
        live = [s["id"] for s in listed["items"] if s["status"] not in TERMINAL]
        for session_id in live:
            await api.delete(f"/v1/sessions/{session_id}", params={"force": "true"})
    for session_id in live:
        await stack.wait_status(session_id, TERMINAL)


async def _usage(stack: Stack, kernel_id: str) -> list[asyncpg.Record]:
    url = stack.settings.effective_database_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(url)
    try:
        query = "SELECT * FROM usage WHERE kernel_id = $1 ORDER BY attempt"
        return list(await conn.fetch(query, kernel_id))
    finally:
        await conn.close()


async def _first_attempt_output(stack: Stack, session_id: str) -> str:
    async with stack.client() as api:
        r = await api.get(f"/v1/sessions/{session_id}/logs", params={"attempt": 1})
        assert r.status_code == 200, r.text
        return r.text


async def test_a_higher_priority_session_preempts_the_fewest_lower_ones(stack: Stack) -> None:
    await _put_group(
        stack, {"preemption": "priority", "preemption_grace_s": 5, "max_preemptions": 1}
    )
    await stack.start_worker("n1", worker_cpu="3")
    low = await stack.submit(**_job("2", 10))
    kept = await stack.submit(**_job("1", 10, preemptible=False))
    for s in (low, kept):
        await stack.wait_output(s["id"], "started")

    # an equal priority never preempts: it waits for room
    equal = await stack.submit(**_job("2", 10))
    await stack.wait_pending(equal["id"], "no node fits")

    high = await stack.submit(**_job("2", 80))
    ran = await stack.wait_status(high["id"], {"RUNNING"})
    assert ran["kernels"][0]["node"] == "n1"

    # the victim: low (2 cpus), never the non-preemptible one; noticed, then queued again
    again = await stack.wait_status(low["id"], {"PENDING", "SCHEDULED", "PREPARING"})
    assert again["preemptions"] == 1
    assert again["preempted_by"] == high["id"]
    moves = [(h["from_status"], h["to_status"], h["reason"]) for h in again["history"]]
    preempted = [m for m in moves if m[1] == "PREEMPTED"]
    assert preempted == [
        ("RUNNING", "PREEMPTED", f"preempted by {high['id'][:8]}… (priority 80 > 10)")
    ]
    requeued = [m for m in moves if m[0] == "PREEMPTED"]
    assert requeued[0][1] == "PENDING"
    assert requeued[0][2].startswith("queued again after preemption 1 (preempted by")
    output = await _first_attempt_output(stack, low["id"])
    assert "JOBGATE_PREEMPTED=1" in output
    assert f"JOBGATE_PREEMPTED_BY={high['id']}" in output
    assert "JOBGATE_GRACE_S=5" in output
    assert output.rstrip().endswith("checkpointed")
    still = await stack.get(kept["id"])
    assert (still["status"], still["preemptions"]) == ("RUNNING", 0)

    # the preempted session waits in its old place: before `equal`, submitted after it
    held = await stack.wait_pending(low["id"], "no node fits")
    assert held["kernels"][0]["attempt"] == 2
    async with stack.client() as api:
        r = await api.delete(f"/v1/sessions/{high['id']}")
        assert r.status_code < 300, r.text
    back = await stack.wait_status(low["id"], {"RUNNING"})
    assert back["kernels"][0]["attempt"] == 2
    assert (await stack.get(equal["id"]))["status"] == "PENDING"

    # preempted max_preemptions (1) times already: no longer preemptible
    higher = await stack.submit(**_job("2", 90))
    waiting = await stack.wait_pending(higher["id"], "no node fits")
    assert waiting["pending_reason"].startswith("no node fits")
    assert (await stack.get(low["id"]))["status"] == "RUNNING"

    # usage: one record per attempt; the first billed up to the moment it stopped
    records = await _usage(stack, low["kernels"][0]["id"])
    assert [r["attempt"] for r in records] == [1, 2]
    stopped = next(h["at"] for h in again["history"] if h["from_status"] == "PREEMPTED")
    assert records[0]["ended_at"] == datetime.fromisoformat(stopped)
    assert records[1]["ended_at"] is None


async def test_an_interactive_session_is_not_preempted_by_default(stack: Stack) -> None:
    await _put_group(stack, {"preemption": "priority", "preemption_grace_s": 1})
    await stack.start_worker("n1", worker_cpu="2")
    notebook = await stack.submit(
        type="interactive",
        command=["sleep", "600"],
        resources={"cpu": "2", "mem": "64m"},
        priority=5,
    )
    await stack.wait_status(notebook["id"], {"RUNNING"})
    urgent = await stack.submit(**_job("2", 100))
    held = await stack.wait_pending(urgent["id"], "no node fits")
    assert "preempting" not in held["pending_reason"]
    assert (await stack.get(notebook["id"]))["status"] == "RUNNING"


async def test_without_opt_out_a_batch_session_that_says_no_is_preempted(stack: Stack) -> None:
    await _put_group(
        stack,
        {"preemption": "priority", "preemption_grace_s": 1, "preemption_opt_out": False},
    )
    await stack.start_worker("n1", worker_cpu="2")
    stubborn = await stack.submit(**_job("2", 10, preemptible=False))
    await stack.wait_output(stubborn["id"], "started")
    urgent = await stack.submit(**_job("2", 90))
    await stack.wait_status(urgent["id"], {"RUNNING"})
    again = await stack.get(stubborn["id"])
    assert (again["preemptible"], again["preemptions"]) == (False, 1)
