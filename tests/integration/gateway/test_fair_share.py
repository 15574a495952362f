"""Fair share through the real gateway on PostgreSQL: a group on the fair-share
sequencer runs the under-served project's session first when one slot frees, the waiting
one says why, ``jobgate usage shares`` shows the figures, and bad input gets its 422."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from harness import Stack

LONG = {"JOBGATE_SIM_DURATION": "600"}
CPU1 = {"cpu": "1", "mem": "64m"}


async def _admin(stack: Stack, method: str, path: str, body: Any = None) -> Any:
    async with stack.client() as api:
        r = await api.request(method, path, json=body)
    assert r.status_code < 300, r.text
    return r.json() if r.content else None


async def _past_usage(stack: Stack, project_id: str, owner_id: str, cpu_hours: int) -> None:
    """A record of *cpu_hours* of one cpu that ended an hour ago, as the accounting
    writes them (gateway/db/usage.py)."""
    url = stack.settings.effective_database_url.replace("postgresql+asyncpg://", "postgresql://")
    ended = datetime.now(UTC) - timedelta(hours=1)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "INSERT INTO usage (kernel_id, attempt, session_id, owner_id, project_id,"
            " resource_group, node_id, slots, started_at, ended_at)"
            " VALUES ('k-past', 1, 's-past', $1, $2, 'default', 'n0', $3::jsonb, $4, $5)",
            owner_id,
            project_id,
            json.dumps({"cpu": "1"}),
            ended - timedelta(hours=cpu_hours),
            ended,
        )
    finally:
        await conn.close()


async def _member(stack: Stack, user: str, project: str) -> tuple[str, str]:
    """A user (created) in a project (created): its key and the project's id."""
    key = await stack.create_user(user)
    created = await _admin(stack, "POST", "/v1/projects", {"name": project})
    await _admin(stack, "POST", f"/v1/projects/{project}/members", {"user": user})
    return key, created["id"]


async def test_fair_share_runs_the_under_served_project_first(stack: Stack) -> None:
    fair = {"sequencer": {"name": "fair-share", "options": {"refresh_s": 1}}}
    await _admin(stack, "PUT", "/v1/resource-groups/default", {"scheduler": fair})
    alice, ml_a = await _member(stack, "alice", "ml-a")
    bob, _ = await _member(stack, "bob", "ml-b")
    async with stack.client(alice) as api:
        alice_id = (await api.get("/v1/users/me")).json()["id"]
    await _past_usage(stack, ml_a, alice_id, cpu_hours=10)  # ml-a ran all day yesterday
    await stack.start_worker(worker_runtime="sim", worker_cpu="1")
    blocker = await stack.submit(alice, command=["x"], env=LONG, resources=CPU1, project="ml-a")
    await stack.wait_status(blocker["id"], {"RUNNING"})
    alice_next = await stack.submit(alice, command=["x"], env=LONG, resources=CPU1, project="ml-a")
    bob_next = await stack.submit(  # later, and with a lower priority
        bob, command=["x"], env=LONG, resources=CPU1, project="ml-b", priority=10
    )
    held = await stack.wait_pending(alice_next["id"], "no node fits")
    await stack.wait_pending(bob_next["id"], "no node fits")
    assert "; project ml-a is over its fair share (factor 0.2" in held["pending_reason"]
    async with stack.client() as api:
        await api.delete(f"/v1/sessions/{blocker['id']}")
    await stack.wait_status(bob_next["id"], {"RUNNING"})
    assert (await stack.get(alice_next["id"]))["status"] == "PENDING"

    figures = json.loads(await stack.cli("usage", "shares", "-o", "json"))
    assert figures["in_effect"] is True
    rows = {p["project"]: p for p in figures["projects"]}
    assert rows["ml-a"]["share"] == rows["ml-b"]["share"] == 1
    assert rows["ml-a"]["normalized_share"] == 0.5
    # 10 cpu-hours, each decayed by at most 11 hours of a 7-day half-life, plus what ran
    assert 36_000 * 2 ** (-11 / 168) < rows["ml-a"]["usage"] < 36_000 + 600
    assert rows["ml-a"]["factor"] < 0.26  # 2^(-1/0.5): nearly all usage, half the shares
    assert rows["ml-b"]["factor"] > 0.99  # bob's session has run for a moment
    said = await stack.cli("admin", "projects", "share", "ml-b", "3")
    assert said.strip() == "project ml-b has share 3"
    listed = await stack.cli("admin", "projects", "ls")
    assert ["ml-b", "3", "bob"] in [line.split() for line in listed.splitlines()]
    table = await stack.cli("usage", "shares", key=bob)  # bob sees his project only
    assert "ml-b" in table
    assert "ml-a" not in table
    assert "FACTOR" in table.splitlines()[0]


async def test_a_project_share_is_set_by_admins_and_must_be_above_zero(stack: Stack) -> None:
    alice, _ = await _member(stack, "alice", "ml-a")
    async with stack.client() as admin, stack.client(alice) as user:
        assert (await admin.get("/v1/projects")).json()[0]["share"] == 1
        r = await admin.patch("/v1/projects/ml-a", json={"share": 3})
        assert r.status_code == 200, r.text
        assert r.json()["share"] == 3
        for bad in (0, -1, "2", None):
            r = await admin.patch("/v1/projects/ml-a", json={"share": bad})
            assert r.status_code == 422, (bad, r.text)
            assert r.json()["field"] == "share", r.json()
        assert (await admin.patch("/v1/projects/nope", json={"share": 1})).status_code == 404
        assert (await user.patch("/v1/projects/ml-a", json={"share": 9})).status_code == 403
        shares = (await admin.get("/v1/usage/shares")).json()
        assert shares["in_effect"] is False
        assert {p["project"]: p["share"] for p in shares["projects"]} == {"ml-a": 3}
        r = await admin.get("/v1/usage/shares", params={"group": "nope"})
        assert r.status_code == 404
        assert r.json()["field"] == "group"


async def test_fair_share_options_are_checked(stack: Stack) -> None:
    async with stack.client() as admin:
        for options in ({"half_life_s": 0}, {"weight_age": -1}, {"billing": {"cpu": "x"}}):
            fair = {"sequencer": {"name": "fair-share", "options": options}}
            r = await admin.put("/v1/resource-groups/default", json={"scheduler": fair})
            assert r.status_code == 422, (options, r.text)
            assert r.json()["field"] == "scheduler"
            assert next(iter(options)) in r.json()["detail"]


async def test_fair_share_preemption_stops_the_over_served_project_for_the_under_served(
    stack: Stack,
) -> None:
    """preemption: fair-share ranks by the multifactor priority, not by the sessions'
    priorities: bob's session of the same priority stops alice's, whose project ran all
    of yesterday, and alice's waits again in its place as its next attempt."""
    fair = {
        "sequencer": {"name": "fair-share", "options": {"refresh_s": 1}},
        "preemption": "fair-share",
        "preemption_grace_s": 1,
    }
    await _admin(stack, "PUT", "/v1/resource-groups/default", {"scheduler": fair})
    alice, ml_a = await _member(stack, "alice", "ml-a")
    bob, _ = await _member(stack, "bob", "ml-b")
    async with stack.client(alice) as api:
        alice_id = (await api.get("/v1/users/me")).json()["id"]
    await _past_usage(stack, ml_a, alice_id, cpu_hours=10)
    await stack.start_worker(worker_runtime="sim", worker_cpu="1")
    victim = await stack.submit(alice, command=["x"], env=LONG, resources=CPU1, project="ml-a")
    await stack.wait_status(victim["id"], {"RUNNING"})
    urgent = await stack.submit(bob, command=["x"], env=LONG, resources=CPU1, project="ml-b")
    await stack.wait_status(urgent["id"], {"RUNNING"}, timeout=60)
    again = await stack.wait_pending(victim["id"], "no node fits")
    assert again["preemptions"] == 1
    assert again["preempted_by"] == urgent["id"]
    said = [h["reason"] for h in again["history"] if h["to_status"] == "PREEMPTED"]
    assert len(said) == 1
    assert said[0].startswith(f"preempted by {urgent['id'][:8]}"), said
    assert "(fair-share priority " in said[0], said  # ranked by fair share, not priority
    assert [h["to_status"] for h in again["history"]][-2:] == ["PREEMPTED", "PENDING"]
    for session in (urgent, again):
        async with stack.client() as api:
            await api.delete(f"/v1/sessions/{session['id']}")
