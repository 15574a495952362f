"""A group's egress at submit and at placement, through the real gateway and scheduler:
nodes that cannot keep a session to it never get it (docs/security.md, Egress)."""

from __future__ import annotations

from typing import Any

from harness import Stack

SIM = {"JOBGATE_SIM_DURATION": "60"}


async def _group(stack: Stack, name: str, scheduler: dict[str, Any]) -> None:
    async with stack.client() as api:
        r = await api.put(f"/v1/resource-groups/{name}", json={"scheduler": scheduler})
        assert r.status_code < 300, r.text


async def test_a_group_whose_nodes_cannot_enforce_its_egress_refuses_at_submit(
    stack: Stack,
) -> None:
    await stack.start_worker("proc", resource_group="sealed")  # the process runtime
    await _group(stack, "sealed", {"egress": "no-private"})
    async with stack.client() as api:
        node = (await api.get("/v1/nodes/proc")).json()
        assert node["egress"] == ["open"]  # a plain process shares the node's network
        refused = await api.post(
            "/v1/sessions", json={"command": ["true"], "resource_group": "sealed"}
        )
        assert refused.status_code == 422, refused.text
        problem = refused.json()
        assert problem["field"] == "resource_group"
        assert "egress no-private" in problem["detail"]
        assert "runtime: process" in problem["detail"]
        assert (await api.get("/v1/sessions", params={"all": "true"})).json()["items"] == []
    await _group(stack, "sealed", {"egress": "open"})  # the operator's call: taken now
    opened = await stack.submit(command=["true"], resource_group="sealed")
    await stack.wait_status(opened["id"], {"SUCCEEDED"})


async def test_in_a_mixed_group_only_nodes_that_enforce_it_get_the_sessions(
    stack: Stack,
) -> None:
    await stack.start_worker("proc", resource_group="mixed", worker_cpu="8")
    await stack.start_worker("sim", resource_group="mixed", worker_runtime="sim", worker_cpu="2")
    await _group(stack, "mixed", {"egress": "none", "sequencer": "fifo"})
    sessions = [
        await stack.submit(
            command=["x"], env=SIM, resource_group="mixed", resources={"cpu": "1", "mem": "64m"}
        )
        for _ in range(3)
    ]
    for session in sessions[:2]:
        running = await stack.wait_status(session["id"], {"RUNNING"})
        assert running["node"] == "sim"  # the process node had room, and got none
    # the third waits for the sim node, though the process node is empty
    waiting = await stack.wait_pending(sessions[2]["id"], "no node")
    assert waiting["status"] == "PENDING"
    async with stack.client() as api:
        for session in sessions:
            await api.delete(f"/v1/sessions/{session['id']}")
