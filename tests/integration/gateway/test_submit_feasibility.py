"""What no node of a group could ever run is a 422 at submit, never an ERROR after
scheduling; a group without nodes still queues, and a node that registered a moment
ago is never overlooked (refusals re-read the nodes)."""

from __future__ import annotations

import asyncio
import time

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
    deadline = time.monotonic() + 30
    while "needs an image" not in (
        (early := await stack.get(queued.json()["id"]))["pending_reason"] or ""
    ):
        assert time.monotonic() < deadline, early
        await asyncio.sleep(0.2)
    assert early["status"] == "PENDING"
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
