"""``POST /v1/sessions/{id}/commit`` refusals, a commit on a node that cannot do it, and
who may delete a private image.

A process worker runs the sessions: its runtime has no image to commit, so an allowed
commit travels to the worker and comes back ``failed`` with the runtime's reason (the
real commit through Podman is tests/e2e/test_session_commit.py).
"""

from __future__ import annotations

from typing import Any

import httpx
from harness import Stack
from waiting import until


async def _commit(api: httpx.AsyncClient, session_id: str, image: str) -> httpx.Response:
    return await api.post(f"/v1/sessions/{session_id}/commit", json={"image": image})


def _problem(r: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    for word in words:
        assert word in body["detail"], body
    return body


async def _images(api: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    r = await api.get("/v1/images")
    assert r.status_code == 200, r.text
    return {i["name"]: i for i in r.json()}


async def test_commit_refusals_and_private_images(stack: Stack) -> None:
    await stack.start_worker()
    alice, bob = await stack.create_user("alice"), await stack.create_user("bob")
    running = await stack.submit(alice, command=["sleep", "60"])
    finished = await stack.submit(alice, command=["true"])
    theirs = await stack.submit(bob, command=["sleep", "60"])
    await stack.wait_status(running["id"], {"RUNNING"})
    await stack.wait_status(theirs["id"], {"RUNNING"})
    await stack.wait_status(finished["id"], {"SUCCEEDED"})
    async with stack.client(alice) as owner, stack.client(bob) as other, stack.client() as admin:
        # no registry: refused with the setting's name
        _problem(await _commit(admin, running["id"], "env:1"), 409, "JOBGATE_IMAGE_REGISTRY")
        stack.settings.image_registry = "127.0.0.1:1"
        # the owner needs a policy; someone else's session does not exist for bob
        _problem(await _commit(owner, running["id"], "env:1"), 403, "allow_commit")
        _problem(await _commit(other, running["id"], "env:1"), 404, "no session")
        r = await admin.put("/v1/policies/user/*", json={"allow_commit": True})
        assert r.status_code == 200, r.text
        assert r.json()["allow_commit"] is True
        # bad names and a session that is not running
        for bad in ("env", "Env:1", "../env:1", "127.0.0.1:5000/env:1", "env:" + "x" * 200):
            body = _problem(await _commit(owner, running["id"], bad), 422)
            assert body.get("field") == "image" or "image" in str(body), body
        _problem(await _commit(owner, finished["id"], "env:1"), 409, "SUCCEEDED", "running")
        # allowed: registered as alice's private image at once, then the node's verdict
        r = await _commit(owner, running["id"], "env:1")
        assert r.status_code == 202, r.text
        image = r.json()
        assert image["name"] == "127.0.0.1:1/env:1"
        assert (image["visibility"], image["owner"], image["state"]) == (
            "private",
            "alice",
            "committing",
        )
        done = await _committed(owner, image["name"])
        assert done["state"] == "failed"
        assert "process runtime" in done["detail"]
        assert "no container image" in done["detail"]
        # private: bob neither sees it nor may use it nor take its name
        assert image["name"] not in await _images(other)
        assert image["name"] in await _images(admin)
        _problem(await _commit(other, theirs["id"], "env:1"), 409, "taken")
        r = await other.post(
            "/v1/sessions",
            json={"command": ["true"], "image": image["name"], "resources": {"cpu": "0.1"}},
        )
        _problem(r, 404, image["name"], "private")
        # its owner may not use a failed one either, and says why
        r = await owner.post(
            "/v1/sessions",
            json={"command": ["true"], "image": image["name"], "resources": {"cpu": "0.1"}},
        )
        _problem(r, 409, image["name"], "failed")


async def test_owners_delete_their_private_images_and_nobody_may_use_them_after(
    stack: Stack,
) -> None:
    await stack.start_worker()
    alice, bob = await stack.create_user("alice"), await stack.create_user("bob")
    stack.settings.image_registry = "127.0.0.1:1"
    running = await stack.submit(alice, command=["sleep", "60"])
    theirs = await stack.submit(bob, command=["sleep", "60"])
    await stack.wait_status(running["id"], {"RUNNING"})
    await stack.wait_status(theirs["id"], {"RUNNING"})
    async with stack.client(alice) as owner, stack.client(bob) as other, stack.client() as admin:
        r = await admin.put("/v1/policies/user/*", json={"allow_commit": True})
        assert r.status_code == 200, r.text
        r = await admin.put("/v1/images/pub:1", json={"service_ports": "jupyter:http:8888"})
        assert r.status_code == 200, r.text
        r = await _commit(owner, running["id"], "env:1")
        assert r.status_code == 202, r.text
        image = r.json()["name"]
        await _committed(owner, image)
        # bob: alice's image is not there for him; a public one is not his to remove
        _problem(await other.delete(f"/v1/images/{image}"), 404, "no registered image")
        _problem(await owner.delete("/v1/images/pub:1"), 403, "admins")
        assert image in await _images(owner)

        removed = await stack.cli("images", "rm", image, key=alice)
        assert removed == f"{image} removed from the registry\n"
        assert image not in await _images(owner)
        assert image not in await _images(admin)
        _problem(await owner.delete(f"/v1/images/{image}"), 404, "no registered image")
        for key, says in ((owner, "deleted"), (other, "private")):  # nobody may use it
            r = await key.post(
                "/v1/sessions",
                json={"command": ["true"], "image": image, "resources": {"cpu": "0.1"}},
            )
            _problem(r, 404, image, says)
        # its name stays alice's: bob cannot take it, alice commits it anew
        _problem(await _commit(other, theirs["id"], "env:1"), 409, "taken")
        r = await _commit(owner, running["id"], "env:1")
        assert r.status_code == 202, r.text
        assert (await _images(owner))[image]["state"] in ("committing", "failed")

        assert (await admin.delete("/v1/images/pub:1")).status_code == 204
        assert "pub:1" not in await _images(owner)


async def _committed(api: httpx.AsyncClient, name: str) -> dict[str, Any]:
    """The image row once its commit came back (done or failed)."""

    async def back() -> dict[str, Any] | None:
        row: dict[str, Any] = (await _images(api))[name]
        return row if row["state"] != "committing" else None

    return await until(back, timeout=30, interval=0.1, what=f"the commit of {name} back")
