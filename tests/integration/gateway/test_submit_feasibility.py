"""What no node of a group could ever run is a 422 at submit, never an ERROR after
scheduling; a group without nodes still queues, and a node that registered a moment
ago is never overlooked (refusals re-read the nodes)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from harness import Stack


async def test_podman_nodes_refuse_a_session_without_an_image_at_submit(
    stack: Stack, podman_socket: str
) -> None:
    async with stack.client() as api:
        queued = await api.post("/v1/sessions", json={"command": ["true"]})
    assert queued.status_code == 201  # no node registered yet: it queues
    await stack.start_worker("p1", worker_runtime="podman")
    async with stack.client() as api:
        r = await api.post("/v1/sessions", json={"command": ["python3", "-V"]})
        huge = await api.post(
            "/v1/sessions",
            json={"command": ["true"], "image": "localhost/jobgate-busybox:latest",
                  "resources": {"cpu": "100000"}},
        )  # fmt: skip
        node = (await api.get("/v1/nodes/p1")).json()
    assert r.status_code == 422, r.text
    problem = r.json()
    assert r.headers["content-type"] == "application/problem+json"
    assert problem["field"] == "image"
    assert "need an image" in problem["detail"]
    assert "--image" in problem["detail"]
    assert huge.status_code == 422
    assert huge.json()["field"] == "resources.cpu"
    assert f"the largest has {node['capacity']['cpu']}" in huge.json()["detail"]
    # the one queued before the node came waits with a reason (the images filter),
    # it is never started there to end ERROR
    early = await stack.wait_pending(queued.json()["id"], "no node fits: 1 node needs an image")
    assert early["pending_reason"] == "no node fits: 1 node needs an image"

    stack.settings.default_image = "localhost/jobgate-python:3.11"  # the operator's default
    async with stack.client() as api:
        ok = await api.post("/v1/sessions", json={"command": ["python3", "-c", "print(6*7)"]})
    assert ok.status_code == 201, ok.text
    assert ok.json()["image"] == "localhost/jobgate-python:3.11"
    await stack.wait_status(ok.json()["id"], {"SUCCEEDED"})
    assert await stack.logs(ok.json()["id"]) == "42\n"


async def test_process_nodes_refuse_an_image_and_ignore_the_default(stack: Stack) -> None:
    stack.settings.default_image = "localhost/jobgate-python:3.11"
    await stack.start_worker("n1")  # the process runtime
    async with stack.client() as api:
        r = await api.post(
            "/v1/sessions", json={"command": ["true"], "image": "localhost/jobgate-python:3.11"}
        )
        plain = await api.post("/v1/sessions", json={"command": ["sh", "-c", "echo plain"]})
    assert r.status_code == 422
    assert r.json()["field"] == "image"
    assert "cannot use an image" in r.json()["detail"]
    assert plain.status_code == 201
    assert plain.json()["image"] is None  # a default image means nothing to a process
    await stack.wait_status(plain.json()["id"], {"SUCCEEDED"})


async def _post(stack: Stack, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    async with stack.client(key) as api:
        return await api.post("/v1/sessions", json={"command": ["true"]} | body)


async def test_a_cluster_no_node_set_could_ever_hold_is_refused_at_submit(stack: Stack) -> None:
    await stack.start_worker("n1", worker_cpu="2", worker_runtime="sim")
    await stack.start_worker("n2", worker_cpu="2", worker_runtime="sim")
    one_cpu = {"resources": {"cpu": "1", "mem": "64m"}}
    single = await _post(stack, one_cpu | {"cluster_size": 3, "cluster_mode": "single-node"})
    assert single.status_code == 422, single.text
    assert single.headers["content-type"] == "application/problem+json"
    assert single.json()["field"] == "cluster_size"
    assert single.json()["detail"] == (
        "single-node: no node in group 'default' has room for all 3 containers of cpu 1, "
        "mem 64MiB (cpu 3, mem 192MiB together); the largest, n1, has cpu 2, mem 8GiB"
    )
    fits = await _post(stack, one_cpu | {"cluster_size": 2, "cluster_mode": "single-node"})
    assert fits.status_code == 201, fits.text
    # multi-node: containers may share a node, so two nodes of 2 cpus hold 4 of 1 cpu
    spread = await _post(stack, one_cpu | {"cluster_size": 4, "cluster_mode": "multi-node"})
    assert spread.status_code == 201, spread.text
    five = await _post(stack, one_cpu | {"cluster_size": 5, "cluster_mode": "multi-node"})
    assert five.status_code == 422, five.text
    assert five.json()["field"] == "cluster_size"
    assert five.json()["detail"] == (
        "multi-node: the nodes of group 'default' could hold at most 4 of 5 containers of "
        "cpu 1, mem 64MiB, even when idle; the largest, n1, has cpu 2, mem 8GiB"
    )
    # a group whose gang step puts each container on a node of its own needs 3 nodes
    async with stack.client() as api:
        r = await api.patch(
            "/v1/resource-groups/default",
            json={"scheduler": {"gang": {"name": "all-or-nothing",
                                         "options": {"distinct_nodes": True}}}},
        )  # fmt: skip
        assert r.status_code == 200, r.text
    distinct = await _post(stack, one_cpu | {"cluster_size": 3, "cluster_mode": "multi-node"})
    assert distinct.status_code == 422, distinct.text
    assert distinct.json()["detail"] == (
        "multi-node: group 'default' puts each container on a node of its own, and only 2 "
        "of its nodes could ever hold one of cpu 1, mem 64MiB; the session asks for 3"
    )
    # the sessions that could run are placed (the accepted ones are not refused later)
    await stack.wait_status(fits.json()["id"], {"SUCCEEDED"})


@pytest.mark.parametrize(
    ("resources", "field", "detail"),
    [
        pytest.param(
            {"cpu": "0", "mem": "64m"},
            "resources.cpu",
            "cpu must be at least 0.01, the minimum of resource group 'default' (asked for 0)",
            id="no-cpu",
        ),
        pytest.param(
            {"cpu": 0.001},
            "resources.cpu",
            "cpu must be at least 0.01, the minimum of resource group 'default' (asked for 0.001)",
            id="below-the-cpu-quota",
        ),
        pytest.param(
            {"mem": "0"},
            "resources.mem",
            "mem must be at least 6MiB, the minimum of resource group 'default' (asked for 0)",
            id="no-mem",
        ),
        pytest.param(
            {"cpu": "0.5", "mem": "1k"},
            "resources.mem",
            "mem must be at least 6MiB, the minimum of resource group 'default' (asked for 1k)",
            id="1k",
        ),
    ],
)
async def test_zero_or_sub_minimum_cpu_and_mem_are_refused_at_submit(
    stack: Stack, resources: dict[str, Any], field: str, detail: str
) -> None:
    r = await _post(stack, {"resources": resources})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field
    assert r.json()["detail"] == detail
    async with stack.client() as api:
        assert (await api.get("/v1/sessions")).json()["items"] == []  # no row written


async def test_a_group_may_raise_its_minimums(stack: Stack) -> None:
    async with stack.client() as api:
        r = await api.put(
            "/v1/resource-groups/small", json={"scheduler": {"min_cpu": "0.25", "min_mem": 2**26}}
        )
        assert r.status_code == 200, r.text
        low = await api.put("/v1/resource-groups/tiny", json={"scheduler": {"min_mem": 1024}})
    assert low.status_code == 422  # below what a runtime can start a container under
    small = {"resource_group": "small"}
    mem = await _post(stack, small | {"resources": {"cpu": "1", "mem": "32m"}})
    assert mem.status_code == 422
    assert mem.json()["detail"] == (
        "mem must be at least 64MiB, the minimum of resource group 'small' (asked for 32m)"
    )
    cpu = await _post(stack, small | {"resources": {"cpu": "0.1", "mem": "64m"}})
    assert cpu.json()["field"] == "resources.cpu"
    assert "at least 0.25" in cpu.json()["detail"]
    ok = await _post(stack, small | {"resources": {"cpu": "0.25", "mem": "64m"}})
    assert ok.status_code == 201, ok.text
    # the defaults (0.5 cpu, 512 MiB) are above the floors: a request without resources
    # is never refused for them
    plain = await _post(stack, {})
    assert plain.status_code == 201, plain.text
    # ... and a group whose floors are above the defaults raises them: a request without
    # resources gets the floors, not a container under the group's own minimum
    async with stack.client() as api:
        r = await api.put(
            "/v1/resource-groups/big", json={"scheduler": {"min_cpu": "1", "min_mem": 2**30}}
        )
        assert r.status_code == 200, r.text
    raised = await _post(stack, {"resource_group": "big"})
    assert raised.status_code == 201, raised.text
    assert raised.json()["resources"] == {"cpu": "1", "mem": str(2**30)}


async def test_a_request_over_the_users_or_projects_limit_is_refused_at_submit(
    stack: Stack,
) -> None:
    bob = await stack.create_user("bob")
    async with stack.client() as api:
        for method, path, body in (
            ("PUT", "/v1/policies/user/bob", {"max_slots": {"mem": "1g"}}),
            ("POST", "/v1/projects", {"name": "vision"}),
            ("POST", "/v1/projects/vision/members", {"user": "bob"}),
            ("PUT", "/v1/policies/project/vision", {"max_slots": {"cpu": "2"}}),
        ):
            r = await api.request(method, path, json=body)
            assert r.status_code < 300, r.text
    big = await _post(stack, {"resources": {"cpu": "1", "mem": "2g"}}, bob)
    assert big.status_code == 422, big.text
    assert big.json()["field"] == "resources.mem"
    assert big.json()["detail"] == (
        "quota: user bob may hold at most 1GiB mem; this session asks for 2GiB, "
        "so it could never start"
    )
    gang = await _post(
        stack,
        {"resources": {"cpu": "1", "mem": "64m"}, "cluster_size": 3,
         "cluster_mode": "multi-node", "project": "vision"},
        bob,
    )  # fmt: skip
    assert gang.status_code == 422, gang.text
    assert gang.json()["detail"] == (
        "quota: project vision may hold at most 2 cpu; this session asks for 3 "
        "(3 containers), so it could never start"
    )
    # what only has to wait for bob's other sessions still queues, as before
    fits = await _post(stack, {"resources": {"cpu": "1", "mem": "1g"}}, bob)
    assert fits.status_code == 201, fits.text
    again = await _post(stack, {"resources": {"cpu": "1", "mem": "1g"}}, bob)
    assert again.status_code == 201, again.text
    # a limit raised a moment ago counts at once (a refusal re-reads the policies)
    async with stack.client() as api:
        r = await api.put("/v1/policies/user/bob", json={"max_slots": {"mem": "4g"}})
        assert r.status_code == 200, r.text
    now = await _post(stack, {"resources": {"cpu": "1", "mem": "2g"}}, bob)
    assert now.status_code == 201, now.text
