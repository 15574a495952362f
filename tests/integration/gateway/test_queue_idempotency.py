"""Job ids come from rows: enqueueing twice is one job, and a repeated start runs once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harness import Stack

from contract.keys import node_queue
from contract.messages import StartKernel
from gateway.queue import connect, enqueue_start


async def test_enqueueing_the_same_start_twice_queues_one_job(redis_url: str) -> None:
    pool = await connect(redis_url)
    job = StartKernel(
        kernel_id="k1", session_id="s1", node_id="n1", session_type="batch", command=["true"]
    )
    await enqueue_start(pool, node_queue("n1"), job)
    await enqueue_start(pool, node_queue("n1"), job)
    assert await pool.zcard(node_queue("n1")) == 1
    await pool.aclose()


async def test_a_start_job_handled_twice_runs_the_session_once(
    stack: Stack, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    command = ["sh", "-c", f"echo once; echo x >> {ran}"]
    await stack.start_worker()
    s = await stack.submit(command=command)
    await stack.wait_status(s["id"], {"SUCCEEDED"})
    # deliver the very same start job again, as a retried arq job would
    session = await stack.get(s["id"])
    pool = await connect(stack.redis_url)
    job = StartKernel(
        kernel_id=session["kernels"][0]["id"],
        session_id=s["id"],
        node_id="n1",
        session_type="batch",
        command=command,
    )
    await enqueue_start(pool, node_queue("n1"), job)
    while await pool.zcard(node_queue("n1")):  # noqa: ASYNC110 - another process consumes it
        await asyncio.sleep(0.05)
    await pool.aclose()
    await asyncio.sleep(1.0)  # time for a (wrong) second run to happen
    assert ran.read_text() == "x\n"  # the command ran once on the node
    again = await stack.get(s["id"])
    assert again["status"] == "SUCCEEDED"
    assert [h["to_status"] for h in again["history"]].count("RUNNING") == 1
