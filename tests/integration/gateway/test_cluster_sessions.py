"""Sessions of several kernels: one kernel's failure ends the session and stops the rest;
``jobgate logs --kernel`` shows one container's output, followed or not."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from harness import Stack
from waiting import until

from contract.keys import EVENTS_QUEUE
from contract.messages import EventBatch, KernelEvent
from plumbing.arq import connect


async def _lost(stack: Stack, session: dict[str, Any], kernel: dict[str, Any]) -> None:
    """The event a worker sends when a kernel's container vanished under it."""
    pool = await connect(stack.redis_url)
    try:
        event = KernelEvent(
            kind="lost",
            kernel_id=kernel["id"],
            session_id=session["id"],
            node_id=kernel["node"],
            ts=time.time(),
            message="its container disappeared",
        )
        await pool.enqueue_job(
            "handle_events",
            EventBatch(events=[event]).model_dump(mode="json"),
            _job_id=f"events:{uuid.uuid4().hex}",
            _queue_name=EVENTS_QUEUE,
        )
    finally:
        await pool.aclose()


async def test_a_lost_kernel_ends_its_cluster_session_and_stops_the_other(
    stack: Stack,
) -> None:
    await stack.start_worker("n1")
    await stack.start_worker("n2")
    session = await stack.submit(
        command=["sleep", "300"],
        cluster_size=2,
        cluster_mode="multi-node",
        resources={"cpu": "0.5", "mem": "64m"},
    )
    running = await stack.wait_status(session["id"], {"RUNNING"}, timeout=30)
    first, second = sorted(running["kernels"], key=lambda k: k["id"])
    await _lost(stack, running, first)
    failed = await stack.wait_status(session["id"], {"ERROR"}, timeout=30)
    assert failed["status_reason"] == "its container disappeared"
    # the other kernel is stopped, not left running
    await _settled(stack, session["id"], lambda k: bool(k["id"] == second["id"]))
    kernels = {k["id"]: k for k in (await stack.get(session["id"]))["kernels"]}
    assert kernels[second["id"]]["status"] == "exited"
    async with stack.client() as api:
        for node in ("n1", "n2"):
            occupied = (await api.get(f"/v1/nodes/{node}")).json()["occupied"]
            assert occupied.get("cpu", "0") in ("0", "0.0"), (node, occupied)


async def test_a_lost_node_ends_the_cluster_session_and_stops_its_kernel_elsewhere(
    stack: Stack,
) -> None:
    stack.settings.node_lost_after_s = 1.0
    doomed = await stack.start_worker_process("n1", JOBGATE_WORKER_CPU="1")
    await stack.start_worker("n2", worker_cpu="1")
    session = await stack.submit(
        command=["sleep", "300"],
        cluster_size=2,
        cluster_mode="multi-node",
        resources={"cpu": "1", "mem": "64m"},
        max_retries=0,
    )
    running = await stack.wait_status(session["id"], {"RUNNING"}, timeout=30)
    assert sorted(k["node"] for k in running["kernels"]) == ["n1", "n2"]
    await doomed.kill_node()
    failed = await stack.wait_status(session["id"], {"ERROR"}, timeout=30)
    assert failed["status_reason"] == "node n1 lost; retries spent (0 of 0)"
    survivor = await _settled(stack, session["id"], lambda k: bool(k["node"] == "n2"))
    assert survivor["status"] == "exited"
    async with stack.client() as api:
        occupied = (await api.get("/v1/nodes/n2")).json()["occupied"]
    assert occupied.get("cpu", "0") in ("0", "0.0"), occupied


async def test_logs_followed_or_not_show_the_chosen_kernels_output(stack: Stack) -> None:
    await stack.start_worker("n1")
    script = (
        'echo "from $JOBGATE_CLUSTER_HOST"; [ "$JOBGATE_CLUSTER_HOST" = sub1 ] && exit 0; '
        'sleep 2; echo "end of $JOBGATE_CLUSTER_HOST"'
    )
    session = await stack.submit(
        command=["sh", "-c", script],
        cluster_size=2,
        cluster_mode="single-node",
        stop_when="all-done",  # sub1's line is never cut short by main1's end
        resources={"cpu": "0.5", "mem": "64m"},
    )
    sid = session["id"]
    # followed from before the first line until the end, while the session runs
    sub, main, every = await asyncio.gather(
        stack.cli("logs", sid, "-f", "--kernel", "sub1"),
        stack.cli("logs", sid, "-f"),
        stack.cli("logs", sid, "-f", "--kernel", "all"),
    )
    assert (await stack.get(sid))["status"] == "SUCCEEDED"
    assert sub == "from sub1\n"
    assert main == "from main1\nend of main1\n"  # main1's, as without -f
    assert sorted(every.splitlines()) == ["end of main1", "from main1", "from sub1"]
    assert await stack.cli("logs", sid, "--kernel", "sub1") == sub
    assert await stack.cli("logs", sid) == main


async def _settled(
    stack: Stack, session_id: str, which: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The session's kernel *which* picks, once it is no longer starting, running or stopping."""

    async def kernel() -> dict[str, Any] | None:
        kernels = (await stack.get(session_id))["kernels"]
        found: dict[str, Any] = next(k for k in kernels if which(k))
        live = found["status"] in ("scheduled", "preparing", "running", "stopping")
        return None if live else found

    return await until(kernel, timeout=30, interval=0.2, what=f"a kernel of {session_id} ended")


async def test_multi_node_sessions_on_shared_networks_meet_on_ports_the_scheduler_gave(
    stack: Stack,
) -> None:
    """Plain processes share their node's network: each multi-node session's MASTER_PORT
    is the port its main1's node got from the scheduler, never another live session's."""
    await stack.start_worker("n1")
    await stack.start_worker("n2")
    sessions = [
        await stack.submit(
            command=["sh", "-c", 'echo "port $MASTER_PORT on $JOBGATE_CLUSTER_HOST"; sleep 30'],
            cluster_size=2,
            cluster_mode="multi-node",
        )
        for _ in range(2)
    ]
    ports = []
    for session in sessions:
        # every container prints its line; main1's may come after a sub's
        text = await stack.wait_output(session["id"], " on main1", timeout=30)
        main = next(line for line in text.splitlines() if line.endswith("on main1"))
        ports.append(int(main.split()[1]))
    assert len(set(ports)) == 2, ports  # two live sessions, two ports
    assert all(29100 <= p <= 29899 for p in ports), ports  # JOBGATE_CLUSTER_UDP_PORTS
    for session in sessions:
        async with stack.client() as api:
            r = await api.delete(f"/v1/sessions/{session['id']}")
            assert r.status_code in (200, 202, 204), r.text
