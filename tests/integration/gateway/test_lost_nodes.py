"""A node that goes silent with a session placed on it but not yet started.

The node dies (worker and keeper killed -9) right after it registered: its heartbeat
lives on for its TTL, so the scheduler still places a session there, and the start job
waits in a queue no one reads. The reconciler must settle the session either way, and
give the node's capacity back. The same dead node also lets these tests speak for its
worker, to send events the gateway must handle whatever their order.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from harness import Stack

from contract.keys import EVENTS_QUEUE
from contract.messages import EventBatch, KernelEvent
from plumbing.arq import connect


async def _silent_node_with_a_scheduled_session(
    stack: Stack, lost_after: float = 300.0
) -> dict[str, Any]:
    """(With *lost_after* long, the tests speak for the dead worker undisturbed.)"""
    stack.settings.node_lost_after_s = lost_after
    worker = await stack.start_worker_process("n1")
    await worker.kill_node()
    session = await stack.submit(command=["sh", "-c", "echo ran"], resources={"cpu": "1"})
    placed = await stack.wait_status(session["id"], {"SCHEDULED"}, timeout=10)
    assert placed["node"] == "n1"
    return placed


async def _node(stack: Stack, node_id: str) -> dict[str, Any]:
    async with stack.client() as api:
        found: dict[str, Any] = (await api.get(f"/v1/nodes/{node_id}")).json()
        return found


async def test_an_unstarted_session_on_a_silent_node_is_placed_again(stack: Stack) -> None:
    session = await _silent_node_with_a_scheduled_session(stack, lost_after=1.0)
    await stack.wait_status(session["id"], {"PENDING"}, timeout=30)
    assert (await _node(stack, "n1"))["occupied"].get("cpu", "0") in ("0", "0.0")
    await stack.start_worker("n2")
    done = await stack.wait_status(session["id"], {"SUCCEEDED"}, timeout=30)
    assert done["node"] == "n2"
    reasons = [h["reason"] for h in done["history"]]
    assert "node n1 stopped responding before it started" in reasons


async def test_a_session_stopped_before_its_silent_node_started_it_ends_cancelled(
    stack: Stack,
) -> None:
    session = await _silent_node_with_a_scheduled_session(stack, lost_after=1.0)
    async with stack.client() as api:
        r = await api.delete(f"/v1/sessions/{session['id']}")
        assert r.status_code == 202, r.text
    assert (await stack.get(session["id"]))["status"] == "TERMINATING"
    done = await stack.wait_status(session["id"], {"CANCELLED"}, timeout=30)
    assert "n1 stopped responding before it started" in done["status_reason"]
    assert done["exit_code"] is None
    assert (await _node(stack, "n1"))["occupied"].get("cpu", "0") in ("0", "0.0")


async def _report(stack: Stack, session: dict[str, Any], *kinds: str, **fields: Any) -> None:
    """Events as the node's worker would send them (that worker is dead: we speak for it)."""
    kernel_id = session["kernels"][0]["id"]
    pool = await connect(stack.redis_url)
    try:
        events = [
            KernelEvent(
                kind=kind,
                kernel_id=kernel_id,
                session_id=session["id"],
                node_id="n1",
                ts=time.time() + i * 0.001,
                **fields,
            )
            for i, kind in enumerate(kinds)
        ]
        await pool.enqueue_job(
            "handle_events",
            EventBatch(events=events).model_dump(mode="json"),
            _job_id=f"events:{uuid.uuid4().hex}",
            _queue_name=EVENTS_QUEUE,
        )
    finally:
        await pool.aclose()


async def test_a_node_stopping_a_preparing_session_cancels_it(stack: Stack) -> None:
    session = await _silent_node_with_a_scheduled_session(stack)
    await _report(stack, session, "preparing")
    await stack.wait_status(session["id"], {"PREPARING"})
    await _report(stack, session, "not_started", message="n1 shut down before it ran")
    done = await stack.wait_status(session["id"], {"CANCELLED"})
    assert done["status_reason"] == "n1 shut down before it ran"
    assert [h["to_status"] for h in done["history"]][-2:] == ["TERMINATING", "CANCELLED"]


async def test_a_late_not_started_does_not_rewrite_a_finished_kernel(stack: Stack) -> None:
    """A stop sent again after the exit gets "not started" from the worker: ignored."""
    session = await _silent_node_with_a_scheduled_session(stack)
    await _report(stack, session, "preparing", "running")
    await stack.wait_status(session["id"], {"RUNNING"})
    await _report(stack, session, "exited", "not_started", exit_code=0)  # in this order
    done = await stack.wait_status(session["id"], {"SUCCEEDED"})
    assert done["exit_code"] == 0
    assert (done["kernels"][0]["status"], done["kernels"][0]["exit_code"]) == ("exited", 0)


async def test_a_running_session_its_node_no_longer_has_ends_when_the_node_registers(
    stack: Stack,
) -> None:
    """The node's worker comes back without the kernel (its state was wiped): ERROR, not
    RUNNING forever."""
    session = await _silent_node_with_a_scheduled_session(stack)
    await _report(stack, session, "preparing", "running")
    await stack.wait_status(session["id"], {"RUNNING"})
    await stack.start_worker("n1")  # a fresh worker for n1: it holds no kernels
    done = await stack.wait_status(session["id"], {"ERROR"}, timeout=30)
    assert done["status_reason"] == "not on n1 any more when its worker registered again"
    assert done["kernels"][0]["status"] == "failed"


async def test_a_running_event_ahead_of_its_preparing_keeps_the_history_whole(
    stack: Stack,
) -> None:
    """Event batches are handled concurrently: "running" may be applied first."""
    session = await _silent_node_with_a_scheduled_session(stack)
    await _report(stack, session, "running")
    running = await stack.wait_status(session["id"], {"RUNNING"})
    await _report(stack, session, "preparing")  # late: changes nothing
    await _report(stack, session, "exited", exit_code=0)
    done = await stack.wait_status(session["id"], {"SUCCEEDED"})
    assert [(h["from_status"], h["to_status"]) for h in done["history"]] == [
        (None, "PENDING"),
        ("PENDING", "SCHEDULED"),
        ("SCHEDULED", "PREPARING"),
        ("PREPARING", "RUNNING"),
        ("RUNNING", "SUCCEEDED"),
    ]
    assert running["history"][-1]["reason"] == "running on n1"
