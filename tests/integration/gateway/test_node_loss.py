"""A node dies under a running batch session: the session runs again elsewhere, once.

Worker n1 (its own process) runs the session; n1 is cut off - its worker and keeper
killed -9, the session's process left running as behind a partition - and once n1 is
lost the reconciler puts the session back to PENDING as attempt 2, and the scheduler
places it on n2. Then n1 comes back with the same node id and state directory: it
re-attaches to attempt 1, which still runs there; the gateway keeps what attempt 1
printed meanwhile under attempt 1, has that attempt stopped and notes its late "exited"
in the history - the session stays with attempt 2 on n2 (docs/node-loss.md). A worker
killed and back soon, by contrast, re-runs nothing.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from harness import Stack
from waiting import until


async def _status_on(stack: Stack, session_id: str, node: str, status: str) -> dict[str, Any]:
    async def there() -> dict[str, Any] | None:
        session = await stack.get(session_id)
        return session if (session["status"], session["node"]) == (status, node) else None

    return await until(there, timeout=60, interval=0.1, what=f"{session_id} {status} on {node}")


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
    release, poke = tmp_path / "release", tmp_path / "poke"
    script = (
        "echo attempt $JOBGATE_ATTEMPT; "
        f"for i in $(seq 900); do [ -e {release} ] && exit 0; "
        f'[ -e {poke} ] && [ -z "$said" ] && said=1 && echo meanwhile $JOBGATE_ATTEMPT; '
        "sleep 0.1; done; exit 9"
    )
    n1 = await stack.start_worker_process("n1")
    session = await stack.submit(command=["sh", "-c", script])
    first = await _status_on(stack, session["id"], "n1", "RUNNING")
    await stack.wait_output(session["id"], "attempt 1")
    kernel_id = first["kernels"][0]["id"]
    old_attempt_dir = tmp_path / "worker" / "n1" / "process" / kernel_id
    assert await _exists(old_attempt_dir)
    await stack.start_worker_process("n2")

    await n1.kill_node(kernels=False)
    moved = await _status_on(stack, session["id"], "n2", "RUNNING")
    assert (moved["retries"], moved["kernels"][0]["attempt"]) == (1, 2)
    history = [(h["to_status"], h["reason"]) for h in moved["history"]]
    pending = [reason for status, reason in history if status == "PENDING"][1:]
    assert len(pending) == 1
    assert pending[0].startswith("retrying after node n1 lost (retry 1 of 3) at ")
    assert ("SCHEDULED", "node n1 lost; attempt 2 placed on n2") in history
    assert [s for s, _ in history][-4:] == ["PENDING", "SCHEDULED", "PREPARING", "RUNNING"]
    # both attempts print while n1 is cut off; the latest attempt's output is the default
    poke.touch()
    output = await stack.wait_output(session["id"], "meanwhile 2")
    assert output == "attempt 2\nmeanwhile 2\n"
    assert await _exists(old_attempt_dir)  # attempt 1 outlived its worker

    # n1 returns, same id and state: what attempt 1 printed while its worker was down is
    # kept under attempt 1; that attempt is stopped there, its "exited" noted
    n1_again = await stack.start_worker_process("n1")
    await _gone(old_attempt_dir)
    assert "re-attached to kernel" in n1_again.log()

    async def first_output() -> str | None:
        text = await _logs(stack, session["id"], attempt=1)
        return text if "meanwhile 1" in text else None

    async def noted() -> dict[str, Any] | None:
        now = await stack.get(session["id"])
        return now if len(now["history"]) > len(moved["history"]) else None

    assert await until(first_output, timeout=60, what="attempt 1's output") == (
        "attempt 1\nmeanwhile 1\n"
    )
    assert await _logs(stack, session["id"]) == "attempt 2\nmeanwhile 2\n"
    still = await until(noted, timeout=60, what="the late exit of attempt 1 in the history")
    assert (still["status"], still["node"], still["kernels"][0]["attempt"]) == (
        "RUNNING",
        "n2",
        2,
    )
    assert still["history"][:-1] == moved["history"]
    note = still["history"][-1]
    assert (note["from_status"], note["to_status"]) == ("RUNNING", "RUNNING")
    assert note["reason"].startswith("attempt 1 on n1 ended ")
    assert note["reason"].endswith(" after the node returned")
    release.touch()
    done = await stack.wait_status(session["id"], {"SUCCEEDED"})
    assert (done["node"], done["exit_code"], done["retries"]) == ("n2", 0, 1)
    assert [h["to_status"] for h in done["history"]][-2:] == ["RUNNING", "SUCCEEDED"]
    async with stack.client() as api:
        nodes = {n["id"]: n for n in (await api.get("/v1/nodes")).json()["items"]}
    for node in ("n1", "n2"):  # every share came back exactly once
        assert nodes[node]["occupied"].get("cpu", "0") in ("0", "0.0"), nodes[node]


async def _logs(stack: Stack, session_id: str, **params: Any) -> str:
    async with stack.client() as api:
        r = await api.get(f"/v1/sessions/{session_id}/logs", params=params)
    assert r.status_code == 200, r.text
    return r.text


async def _node(stack: Stack, node_id: str) -> dict[str, Any]:
    async with stack.client() as api:
        found: dict[str, Any] = (await api.get(f"/v1/nodes/{node_id}")).json()
        return found


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


async def test_a_worker_killed_and_back_soon_is_a_restart_not_a_node_loss(
    stack: Stack, tmp_path: Path
) -> None:
    """Worker n1 is killed -9 (its keeper and the session's process live on, as after a
    crash that systemd restarts); the command ends while no worker runs. The node only
    shows "disconnected" - nothing is re-run although the silence outlasts the loss
    rule - and the returning worker reports the command's real exit code and end."""
    stack.settings.node_lost_after_s = 0.5
    stack.settings.retry_backoff_s = 0.1
    go, runs = tmp_path / "go", tmp_path / "runs"
    script = (
        f"echo attempt $JOBGATE_ATTEMPT; echo run >> {runs}; "
        f"for i in $(seq 600); do [ -e {go} ] && exit 3; sleep 0.05; done; exit 9"
    )
    n1 = await stack.start_worker_process("n1")
    await stack.start_worker_process("n2")  # where a re-run would go
    session = await stack.submit(command=["sh", "-c", script], max_retries=3)
    first = await _status_on(stack, session["id"], "n1", "RUNNING")
    await stack.wait_output(session["id"], "attempt 1")
    exit_file = tmp_path / "worker" / "n1" / "process" / first["kernels"][0]["id"] / "exit"

    await n1.kill9()
    go.touch()  # the command ends while its worker is down
    await stack.kernel_ended(first)
    ended_at = json.loads(await asyncio.to_thread(exit_file.read_text))["at"]

    async def disconnected() -> dict[str, Any] | None:
        node = await _node(stack, "n1")
        return node if node["status"] == "disconnected" else None

    n1_seen = _at((await until(disconnected, timeout=30, what="n1 disconnected"))["last_seen_at"])

    # without the keeper n1 would be lost by now: two ticks after the rule held (n2's
    # last_seen_at moves with every tick)
    rule = stack.settings.node_lost_after_s + 2 * stack.settings.tick_interval_s

    async def ticked_past_the_loss_rule() -> bool:
        return _at((await _node(stack, "n2"))["last_seen_at"]) > n1_seen + rule

    await until(ticked_past_the_loss_rule, timeout=30, what="reconciler ticks past the rule")
    held = await stack.get(session["id"])
    assert (held["status"], held["node"], held["retries"]) == ("RUNNING", "n1", 0)

    restarted_at = time.time()
    back = await stack.start_worker_process("n1")
    done = await stack.wait_status(session["id"], {"FAILED"})
    assert "re-attached to kernel" in back.log()
    assert (done["node"], done["exit_code"], done["retries"]) == ("n1", 3, 0)
    assert done["kernels"][0]["attempt"] == 1
    assert abs(_at(done["ended_at"]) - ended_at) < 1.0  # its real end, not the restart
    assert _at(done["ended_at"]) < restarted_at
    assert not [h for h in done["history"] if "lost" in (h["reason"] or "")], done["history"]
    assert [h["to_status"] for h in done["history"]][-2:] == ["RUNNING", "FAILED"]
    assert await asyncio.to_thread(runs.read_text) == "run\n"  # it ran once
    assert await stack.wait_output(session["id"], "attempt 1") == "attempt 1\n"


async def test_an_interactive_session_on_a_killed_node_ends_error(stack: Stack) -> None:
    stack.settings.node_lost_after_s = 1.0
    n1 = await stack.start_worker_process("n1")
    session = await stack.submit(type="interactive", command=["sleep", "300"])
    await _status_on(stack, session["id"], "n1", "RUNNING")
    await stack.start_worker_process("n2")
    await n1.kill_node()
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
    await _status_on(stack, session["id"], "n1", "RUNNING")
    await n1.kill_node()  # dead first: the stop job waits on a queue no one reads
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
