"""A session's life through the real gateway, scheduler, worker, PostgreSQL and Redis."""

from __future__ import annotations

import asyncio

from harness import Stack


async def test_batch_session_succeeds_with_output_and_history(stack: Stack) -> None:
    await stack.start_worker()
    s = await stack.submit(command=["python3", "-c", "print(6*7)"])
    done = await stack.wait_status(s["id"], {"SUCCEEDED"})
    assert done["exit_code"] == 0
    assert await stack.logs(s["id"]) == "42\n"
    history = [(h["from_status"], h["to_status"]) for h in done["history"]]
    assert history == [
        (None, "PENDING"),
        ("PENDING", "SCHEDULED"),
        ("SCHEDULED", "PREPARING"),
        ("PREPARING", "RUNNING"),
        ("RUNNING", "SUCCEEDED"),
    ]
    assert all(h["reason"] for h in done["history"])
    assert done["node"] == "n1"
    assert done["started_at"]
    assert done["ended_at"]


async def test_nonzero_exit_fails_with_its_code_and_both_streams(stack: Stack) -> None:
    await stack.start_worker()
    s = await stack.submit(command=["sh", "-c", "echo to-out; echo to-err >&2; exit 3"])
    done = await stack.wait_status(s["id"], {"FAILED"})
    assert done["exit_code"] == 3
    assert done["status_reason"] == "exited with code 3"
    async with stack.client() as api:
        entries = (await api.get(f"/v1/sessions/{s['id']}/logs", params={"format": "json"})).json()
    by_stream = {e["stream"]: e["data"] for e in entries["items"]}
    assert by_stream == {"stdout": "to-out\n", "stderr": "to-err\n"}


async def test_session_env_reaches_the_process_and_worker_secrets_do_not(stack: Stack) -> None:
    await stack.start_worker()
    s = await stack.submit(
        command=["sh", "-c", 'echo "$GREETING|${JOBGATE_NODE_TOKEN:-none}|$JOBGATE_SESSION_ID"'],
        env={"GREETING": "hello"},
    )
    await stack.wait_status(s["id"], {"SUCCEEDED"})
    assert await stack.logs(s["id"]) == f"hello|none|{s['id']}\n"


async def test_command_not_found_fails_with_127(stack: Stack) -> None:
    await stack.start_worker()
    s = await stack.submit(command=["no-such-command-here"])
    done = await stack.wait_status(s["id"], {"FAILED"})
    assert done["exit_code"] == 127
    assert "cannot run" in await stack.logs(s["id"])


async def test_terminate_running_session(stack: Stack) -> None:
    await stack.start_worker()
    s = await stack.submit(command=["sh", "-c", "echo started; sleep 60"])
    await stack.wait_status(s["id"], {"RUNNING"})
    async with stack.client() as api:
        r = await api.delete(f"/v1/sessions/{s['id']}")
    assert r.status_code == 202
    assert r.json()["status"] == "TERMINATING"
    done = await stack.wait_status(s["id"], {"TERMINATED"}, timeout=15)
    assert done["exit_code"] == 143  # SIGTERM, within the grace period
    assert "started" in await stack.logs(s["id"])


async def test_terminate_kills_after_grace_when_sigterm_is_ignored(stack: Stack) -> None:
    await stack.start_worker(stop_grace_s=1.0)
    stack.settings.stop_grace_s = 1.0
    s = await stack.submit(command=["sh", "-c", "trap '' TERM; echo ready; sleep 60"])
    await stack.wait_status(s["id"], {"RUNNING"})
    await stack.wait_output(s["id"], "ready")
    async with stack.client() as api:
        await api.delete(f"/v1/sessions/{s['id']}")
    done = await stack.wait_status(s["id"], {"TERMINATED"}, timeout=15)
    assert done["exit_code"] == 137  # SIGKILL after the grace period


async def test_cancel_pending_session(stack: Stack) -> None:
    s = await stack.submit(command=["true"])  # no worker: stays pending
    pending = await stack.wait_status(s["id"], {"PENDING"})
    assert pending["pending_reason"]
    async with stack.client() as api:
        r = await api.delete(f"/v1/sessions/{s['id']}")
    assert r.json()["status"] == "CANCELLED"
    assert r.json()["status_reason"] == "cancelled by admin"


async def test_waits_with_reason_then_runs_when_capacity_frees(stack: Stack) -> None:
    await stack.start_worker(worker_cpu="1")
    first = await stack.submit(command=["sleep", "300"], resources={"cpu": "1"})
    await stack.wait_status(first["id"], {"RUNNING"})
    second = await stack.submit(command=["true"], resources={"cpu": "1"})
    waiting = await stack.wait_pending(second["id"], "no node fits")  # a pass says why
    assert "cpu" in waiting["pending_reason"]
    async with stack.client() as api:  # the capacity frees: the first one is terminated
        await api.delete(f"/v1/sessions/{first['id']}")
    await stack.wait_status(first["id"], {"TERMINATED"})
    done = await stack.wait_status(second["id"], {"SUCCEEDED"}, timeout=20)
    assert done["exit_code"] == 0


async def test_interactive_session_runs_until_terminated(stack: Stack) -> None:
    await stack.start_worker(worker_runtime="sim")
    s = await stack.submit(type="interactive")
    await stack.wait_status(s["id"], {"RUNNING"})
    await asyncio.sleep(1.0)
    assert (await stack.get(s["id"]))["status"] == "RUNNING"
    async with stack.client() as api:
        await api.delete(f"/v1/sessions/{s['id']}")
    await stack.wait_status(s["id"], {"TERMINATED"})


async def test_platform_failure_ends_error_with_reason(stack: Stack) -> None:
    await stack.start_worker(worker_runtime="sim")
    s = await stack.submit(command=["x"], env={"JOBGATE_SIM_START_ERROR": "disk full on n1"})
    done = await stack.wait_status(s["id"], {"ERROR"})
    assert done["status_reason"] == "disk full on n1"


async def test_embedded_sqlite_stack_runs_sessions(sqlite_stack: Stack) -> None:
    await sqlite_stack.start_worker()
    sessions = [await sqlite_stack.submit(command=["sh", "-c", f"exit {i}"]) for i in range(3)]
    for i, s in enumerate(sessions):
        done = await sqlite_stack.wait_status(s["id"], {"SUCCEEDED", "FAILED"})
        assert done["exit_code"] == i
