"""Scheduling policies through the real gateway on PostgreSQL: quotas, dependencies,
start times, drain/cordon, priorities, DRF between users, and the admin API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from harness import Stack

LONG = {"JOBGATE_SIM_DURATION": "600"}
CPU1 = {"cpu": "1", "mem": "64m"}


async def _admin(stack: Stack, method: str, path: str, body: Any = None) -> Any:
    async with stack.client() as api:
        r = await api.request(method, path, json=body)
    assert r.status_code < 300, r.text
    return r.json() if r.content else None


async def _terminate(stack: Stack, session_id: str) -> None:
    async with stack.client() as api:
        await api.delete(f"/v1/sessions/{session_id}")


async def test_user_quota_holds_sessions_back_with_a_reason(stack: Stack) -> None:
    await stack.start_worker(worker_runtime="sim")
    alice = await stack.create_user("alice")
    await _admin(stack, "PUT", "/v1/policies/user/alice", {"max_sessions": 2})
    first = [await stack.submit(alice, command=["x"], env=LONG) for _ in range(2)]
    for s in first:
        await stack.wait_status(s["id"], {"RUNNING"})
    third = await stack.submit(alice, command=["x"], env=LONG)
    waiting = await stack.wait_pending(third["id"], "quota:")
    assert waiting["pending_reason"] == "quota: user alice already runs 2 of 2 sessions"
    # another user is not held back by alice's quota
    other = await stack.submit(command=["x"], env=LONG)
    await stack.wait_status(other["id"], {"RUNNING"})
    await _terminate(stack, first[0]["id"])
    await stack.wait_status(third["id"], {"RUNNING"})


async def test_max_pending_refuses_at_create_with_429(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    await _admin(stack, "PUT", "/v1/policies/user/*", {"max_pending": 1})  # the default
    await stack.submit(alice, command=["x"])
    async with stack.client(alice) as api:
        r = await api.post("/v1/sessions", json={"command": ["x"], "resources": CPU1})
    assert r.status_code == 429
    assert r.json()["detail"] == "quota: user alice already has 1 of 1 pending sessions"


async def test_a_project_max_pending_counts_every_member_at_create(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    await _admin(stack, "POST", "/v1/projects", {"name": "vision"})
    for user in ("alice", "bob"):
        await _admin(stack, "POST", "/v1/projects/vision/members", {"user": user})
    await _admin(stack, "PUT", "/v1/policies/project/vision", {"max_pending": 1})
    await stack.submit(alice, command=["x"], project="vision")  # no node: it stays pending
    async with stack.client(bob) as api:
        r = await api.post("/v1/sessions", json={"command": ["x"], "project": "vision"})
        assert r.status_code == 429, r.text
        problem = r.json()
        assert problem["type"] == "urn:jobgate:problem:quota-exceeded"
        assert problem["detail"] == "quota: project vision already has 1 of 1 pending sessions"
        # the limit is the project's: bob's own sessions outside it are not held back
        r = await api.post("/v1/sessions", json={"command": ["x"]})
        assert r.status_code == 201, r.text


async def test_project_quota_counts_every_member(stack: Stack) -> None:
    await stack.start_worker(worker_runtime="sim")
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    await _admin(stack, "POST", "/v1/projects", {"name": "vision"})
    for user in ("alice", "bob"):
        await _admin(stack, "POST", "/v1/projects/vision/members", {"user": user})
    await _admin(stack, "PUT", "/v1/policies/project/vision", {"max_slots": {"cpu": 2}})
    a = await stack.submit(alice, command=["x"], env=LONG, project="vision", resources=CPU1)
    b = await stack.submit(bob, command=["x"], env=LONG, project="vision", resources=CPU1)
    await stack.wait_status(a["id"], {"RUNNING"})
    await stack.wait_status(b["id"], {"RUNNING"})
    c = await stack.submit(alice, command=["x"], env=LONG, project="vision", resources=CPU1)
    held = await stack.wait_pending(c["id"], "quota: project vision")
    assert "cpu" in held["pending_reason"]
    # not a member: refused at create
    eve = await stack.create_user("eve")
    async with stack.client(eve) as api:
        r = await api.post("/v1/sessions", json={"command": ["x"], "project": "vision"})
    assert r.status_code == 403


async def test_dependencies_wait_then_run_or_are_cancelled(stack: Stack) -> None:
    await stack.start_worker(worker_runtime="sim")
    first = await stack.submit(command=["x"], env={"JOBGATE_SIM_DURATION": "1.5"})
    after = await stack.submit(command=["x"], depends_on=[first["id"]])
    await stack.wait_status(first["id"], {"RUNNING"})
    waiting = await stack.get(after["id"])
    assert waiting["status"] == "PENDING"
    assert waiting["pending_reason"].startswith(f"waiting for dependency {first['id'][:4]}")
    assert (await stack.wait_status(after["id"], {"SUCCEEDED"}))["exit_code"] == 0

    failing = await stack.submit(command=["x"], env={"JOBGATE_SIM_EXIT_CODE": "2"})
    doomed = await stack.submit(command=["x"], depends_on=[failing["id"]])
    cancelled = await stack.wait_status(doomed["id"], {"CANCELLED"})
    assert failing["id"][:4] in cancelled["status_reason"]
    assert "FAILED" in cancelled["status_reason"]


async def test_start_time_holds_a_session_until_then(stack: Stack) -> None:
    await stack.start_worker(worker_runtime="sim")
    later = await stack.submit(command=["x"], starts_at="+3s")
    await stack.wait_pending(later["id"], "starts at")
    done = await stack.wait_status(later["id"], {"SUCCEEDED"}, timeout=20)
    # held until then, not just judged once: it started no sooner than it was told to
    starts_at = datetime.fromisoformat(done["starts_at"])
    assert datetime.fromisoformat(done["started_at"]) >= starts_at
    assert (starts_at - datetime.fromisoformat(done["created_at"])).total_seconds() >= 2.5


async def test_drained_node_takes_nothing_new_until_uncordoned(stack: Stack) -> None:
    await stack.start_worker(worker_runtime="sim")
    running = await stack.submit(command=["x"], env=LONG)
    await stack.wait_status(running["id"], {"RUNNING"})
    node = await _admin(stack, "POST", "/v1/nodes/n1/drain")
    assert node["admin_state"] == "draining"
    queued = await stack.submit(command=["x"], env=LONG)
    held = await stack.wait_pending(queued["id"], "no node fits")
    assert "draining" in held["pending_reason"]
    assert (await stack.get(running["id"]))["status"] == "RUNNING"  # untouched
    await _admin(stack, "POST", "/v1/nodes/n1/uncordon")
    await stack.wait_status(queued["id"], {"RUNNING"})
    alice = await stack.create_user("alice")
    async with stack.client(alice) as api:
        assert (await api.post("/v1/nodes/n1/cordon")).status_code == 403


async def test_higher_priority_goes_first(stack: Stack) -> None:
    await stack.start_worker(worker_runtime="sim", worker_cpu="1")
    blocker = await stack.submit(command=["x"], env=LONG, resources=CPU1)
    await stack.wait_status(blocker["id"], {"RUNNING"})
    low = await stack.submit(command=["x"], env=LONG, resources=CPU1, priority=10)
    high = await stack.submit(command=["x"], env=LONG, resources=CPU1, priority=90)
    for waiting in (low, high):  # both judged by the scheduler before the blocker goes
        await stack.wait_pending(waiting["id"], "no node fits")
    await _terminate(stack, blocker["id"])
    await stack.wait_status(high["id"], {"RUNNING"})
    assert (await stack.get(low["id"]))["status"] == "PENDING"


async def test_drf_serves_the_user_with_the_smaller_dominant_share(stack: Stack) -> None:
    await _admin(stack, "PUT", "/v1/resource-groups/default", {"scheduler": {"sequencer": "drf"}})
    await stack.start_worker(worker_runtime="sim", worker_cpu="4")
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    alices = [await stack.submit(alice, command=["x"], env=LONG, resources=CPU1) for _ in range(3)]
    bobs = [await stack.submit(bob, command=["x"], env=LONG, resources=CPU1)]
    for s in alices + bobs:
        await stack.wait_status(s["id"], {"RUNNING"})
    alice_next = await stack.submit(alice, command=["x"], env=LONG, resources=CPU1)
    bob_next = await stack.submit(bob, command=["x"], env=LONG, resources=CPU1)  # later
    for waiting in (alice_next, bob_next):  # both judged by the scheduler first
        await stack.wait_pending(waiting["id"], "no node fits")
    await _terminate(stack, alices[0]["id"])  # one cpu frees: alice 2/4, bob 1/4
    await stack.wait_status(bob_next["id"], {"RUNNING"})
    assert (await stack.get(alice_next["id"]))["status"] == "PENDING"


async def test_a_broken_scheduler_config_is_refused(stack: Stack) -> None:
    async with stack.client() as api:
        r = await api.put("/v1/resource-groups/gpu", json={"scheduler": {"sequencer": "nope"}})
        ok = await api.put("/v1/resource-groups/gpu", json={"scheduler": {"sequencer": "lifo"}})
        listed = await api.get("/v1/resource-groups")
    assert r.status_code == 422
    assert r.json()["field"] == "scheduler"
    assert "nope" in r.json()["detail"]
    assert ok.status_code == 200
    # stored as written; shown also as the scheduler reads it (snapshot.group_config)
    assert ok.json()["scheduler"] == {"sequencer": "lifo"}
    effective = ok.json()["effective"]
    assert effective["sequencer"] == {"name": "lifo", "options": {}}
    assert effective["allow_unenforced_fractions"] is False
    assert [f["name"] for f in effective["filters"]][-1] == "fits"
    assert {g["name"]: g["effective"] for g in listed.json()}["gpu"] == effective


async def test_heuristic_fifo_head_stops_blocking_after_failed_passes(stack: Stack) -> None:
    await stack.start_worker(worker_runtime="sim", worker_cpu="2")
    busy = await stack.submit(command=["x"], env=LONG, resources=CPU1)
    await stack.wait_status(busy["id"], {"RUNNING"})
    head = await stack.submit(command=["x"], env=LONG, resources={"cpu": "2", "mem": "64m"})
    small = await stack.submit(command=["x"], env=LONG, resources=CPU1)  # fits now
    # the head fails pass after pass (ticks every second here); after 3 it stops blocking
    await stack.wait_status(small["id"], {"RUNNING"}, timeout=30)
    waiting = await stack.get(head["id"])
    assert waiting["status"] == "PENDING"
    assert waiting["pending_reason"].startswith("no node fits")
