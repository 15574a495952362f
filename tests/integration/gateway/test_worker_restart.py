"""A worker killed with -9 and started again re-attaches: nothing lost, nothing twice."""

from __future__ import annotations

import asyncio

from harness import Stack

SCRIPT = "for i in $(seq 1 30); do echo line $i; sleep 0.1; done; exit 7"


async def test_killed_worker_reattaches_and_reports_the_real_exit(stack: Stack) -> None:
    worker = await stack.start_worker_process()
    s = await stack.submit(command=["sh", "-c", SCRIPT])
    await stack.wait_output(s["id"], "line 5")
    await worker.kill9()
    await asyncio.sleep(0.5)  # the job keeps printing while no worker watches it
    await stack.start_worker_process()
    done = await stack.wait_status(s["id"], {"FAILED"}, timeout=30)
    assert done["exit_code"] == 7
    lines = (await stack.logs(s["id"])).splitlines()
    assert lines == [f"line {i}" for i in range(1, 31)]  # all of it, once, in order


async def test_job_that_ended_while_the_worker_was_down_is_reported(stack: Stack) -> None:
    worker = await stack.start_worker_process()
    s = await stack.submit(command=["sh", "-c", "echo before; sleep 1; echo after"])
    await stack.wait_output(s["id"], "before")
    running = await stack.get(s["id"])
    await worker.kill9()
    await stack.kernel_ended(running)  # it finishes with nobody watching
    await stack.start_worker_process()
    done = await stack.wait_status(s["id"], {"SUCCEEDED"}, timeout=30)
    assert done["exit_code"] == 0
    assert await stack.logs(s["id"]) == "before\nafter\n"


async def test_graceful_worker_stop_leaves_sessions_running(stack: Stack) -> None:
    worker = await stack.start_worker_process()
    s = await stack.submit(command=["sh", "-c", "sleep 2; echo done"])
    await stack.wait_status(s["id"], {"RUNNING"})
    assert await worker.terminate() == 0
    await stack.start_worker_process()
    done = await stack.wait_status(s["id"], {"SUCCEEDED"}, timeout=30)
    assert await stack.logs(s["id"]) == "done\n"
    assert done["exit_code"] == 0
