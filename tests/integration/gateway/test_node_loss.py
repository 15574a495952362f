"""A node dies under a running batch session: the session runs again elsewhere, once.

Worker n1 (its own process, killed -9) runs the session; once n1 is lost the reconciler
puts the session back to PENDING as attempt 2, and the scheduler places it on n2. Then
n1 comes back with the same node id and state directory: it re-attaches to attempt 1,
which still runs there; the gateway has that attempt stopped and ignores its late
"exited" - the session stays with attempt 2 on n2 (docs/node-loss.md).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from harness import Stack


async def _until(stack: Stack, session_id: str, node: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    session: dict[str, Any] = {}
    while time.monotonic() < deadline:
        session = await stack.get(session_id)
        if (session["status"], session["node"]) == (status, node):
            return session
        await asyncio.sleep(0.1)
    raise AssertionError(f"not {status} on {node}: {session}")


async def _exists(path: Path) -> bool:
    return await asyncio.to_thread(path.exists)


async def _gone(path: Path) -> None:
    for _ in range(600):
        if not await _exists(path):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} is still there")


async def test_a_killed_node_s_batch_session_runs_again_on_another_node(
    stack: Stack, tmp_path: Path
) -> None:
    stack.settings.node_lost_after_s = 1.0
    stack.settings.retry_backoff_s = 0.5
    release = tmp_path / "release"
    script = (
        "echo attempt $JOBGATE_ATTEMPT; "
        f"for i in $(seq 900); do [ -e {release} ] && exit 0; sleep 0.1; done; exit 9"
    )
    n1 = await stack.start_worker_process("n1")
    session = await stack.submit(command=["sh", "-c", script])
    first = await _until(stack, session["id"], "n1", "RUNNING")
    await stack.wait_output(session["id"], "attempt 1")
    kernel_id = first["kernels"][0]["id"]
    old_attempt_dir = tmp_path / "worker" / "n1" / "process" / kernel_id
    assert await _exists(old_attempt_dir)
    await stack.start_worker_process("n2")

    await n1.kill9()
    moved = await _until(stack, session["id"], "n2", "RUNNING")
    assert (moved["retries"], moved["kernels"][0]["attempt"]) == (1, 2)
    history = [(h["to_status"], h["reason"]) for h in moved["history"]]
    pending = [reason for status, reason in history if status == "PENDING"][1:]
    assert len(pending) == 1
    assert pending[0].startswith("retrying after node n1 lost (retry 1 of 3) at ")
    assert ("SCHEDULED", "node n1 lost; attempt 2 placed on n2") in history
    assert [s for s, _ in history][-4:] == ["PENDING", "SCHEDULED", "PREPARING", "RUNNING"]
    output = await stack.wait_output(session["id"], "attempt 2")
    assert output == "attempt 1\nattempt 2\n"  # the new attempt's output is kept too
    assert await _exists(old_attempt_dir)  # attempt 1 outlived its worker

    # n1 returns, same id and state: attempt 1 is stopped there, its "exited" ignored
    n1_again = await stack.start_worker_process("n1")
    await _gone(old_attempt_dir)
    assert "re-attached to kernel" in n1_again.log()
    still = await stack.get(session["id"])
    assert (still["status"], still["node"], still["kernels"][0]["attempt"]) == (
        "RUNNING",
        "n2",
        2,
    )
    assert still["history"] == moved["history"]
    release.touch()
    done = await stack.wait_status(session["id"], {"SUCCEEDED"})
    assert (done["node"], done["exit_code"], done["retries"]) == ("n2", 0, 1)
    assert [h["to_status"] for h in done["history"]][-2:] == ["RUNNING", "SUCCEEDED"]
    async with stack.client() as api:
        nodes = {n["id"]: n for n in (await api.get("/v1/nodes")).json()["items"]}
    for node in ("n1", "n2"):  # every share came back exactly once
        assert nodes[node]["occupied"].get("cpu", "0") in ("0", "0.0"), nodes[node]


async def test_an_interactive_session_on_a_killed_node_ends_error(stack: Stack) -> None:
    stack.settings.node_lost_after_s = 1.0
    n1 = await stack.start_worker_process("n1")
    session = await stack.submit(type="interactive", command=["sleep", "300"])
    await _until(stack, session["id"], "n1", "RUNNING")
    await stack.start_worker_process("n2")
    await n1.kill9()
    ended = await stack.wait_status(session["id"], {"ERROR"})
    assert ended["status_reason"] == (
        "node n1 lost (an interactive session is not re-run elsewhere)"
    )
    assert (ended["retries"], ended["kernels"][0]["status"]) == (0, "failed")


async def test_a_session_stopping_when_its_node_dies_ends_terminated(stack: Stack) -> None:
    """Asked to stop, then its node is lost before the stop arrived: what was asked
    happened, so TERMINATED (not ERROR), the history naming the lost node."""
    stack.settings.node_lost_after_s = 1.0
    n1 = await stack.start_worker_process("n1")
    session = await stack.submit(command=["sleep", "300"], max_retries=3)
    await _until(stack, session["id"], "n1", "RUNNING")
    await n1.kill9()  # dead first: the stop job waits on a queue no one reads
    async with stack.client() as api:
        r = await api.delete(f"/v1/sessions/{session['id']}")
        assert r.status_code == 202, r.text
    ended = await stack.wait_status(session["id"], {"TERMINATED"})
    assert ended["status_reason"].endswith("; node n1 lost"), ended["status_reason"]
    assert [h["to_status"] for h in ended["history"]][-2:] == ["TERMINATING", "TERMINATED"]
    assert (ended["retries"], ended["kernels"][0]["status"]) == (0, "failed")


async def test_max_retries_is_validated(stack: Stack) -> None:
    async with stack.client() as api:
        r = await api.post("/v1/sessions", json={"command": ["true"], "max_retries": 101})
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "max_retries" in r.text
