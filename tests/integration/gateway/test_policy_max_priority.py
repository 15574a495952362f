"""The resource policies' ``max_priority`` through the real gateway on PostgreSQL: set,
listed and lifted like the other limits; at create the lower of the owner's and the
project's cap refuses a higher priority with a 422, and a request that asked for none
gets the default lowered to the cap (docs/security.md, "Priority and preemption")."""

from __future__ import annotations

import json
from typing import Any

from harness import Stack

CPU = {"cpu": "0.1", "mem": "64m"}


async def _admin(stack: Stack, method: str, path: str, body: Any = None) -> Any:
    async with stack.client() as api:
        r = await api.request(method, path, json=body)
    assert r.status_code < 300, r.text
    return r.json() if r.content else None


async def _post(stack: Stack, key: str, path: str, body: dict[str, Any]) -> Any:
    async with stack.client(key) as api:
        return await api.post(path, json=body)


async def test_a_cap_refuses_a_higher_priority_and_null_lifts_it(stack: Stack) -> None:
    bob = await stack.create_user("bob")
    policy = await _admin(stack, "PUT", "/v1/policies/user/bob", {"max_priority": 60})
    assert policy["max_priority"] == 60
    listed = await _admin(stack, "GET", "/v1/policies")
    assert [(p["subject"], p["max_priority"]) for p in listed] == [("bob", 60)]

    r = await _post(stack, bob, "/v1/sessions", {"command": ["x"], "priority": 90})
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["detail"] == "priority 90 is above the highest user bob may ask for (60)"
    assert problem["field"] == "priority"
    assert r.headers["content-type"].startswith("application/problem+json")
    # arrays are sessions too: the same check
    r = await _post(stack, bob, "/v1/sessions", {"command": ["x"], "priority": 61, "count": 2})
    assert r.status_code == 422, r.text
    assert (await stack.submit(bob, command=["x"], priority=60))["priority"] == 60

    # merge patch: null removes the cap (a refusal reads the policies again, so at once)
    lifted = await _admin(stack, "PATCH", "/v1/policies/user/bob", {"max_priority": None})
    assert lifted["max_priority"] is None
    assert (await stack.submit(bob, command=["x"], priority=90))["priority"] == 90


async def test_the_default_policy_caps_and_admins_are_not_exempt(stack: Stack) -> None:
    root = await stack.create_user("root", role="admin")
    await _admin(stack, "PUT", "/v1/policies/user/*", {"max_priority": 30})
    r = await _post(stack, root, "/v1/sessions", {"command": ["x"], "priority": 31})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == "priority 31 is above the highest user root may ask for (30)"
    # a request that asked for no priority is not refused: the default becomes the cap
    assert (await stack.submit(root, command=["x"]))["priority"] == 30
    # a user's own policy without max_priority falls back to the default's cap
    carol = await stack.create_user("carol")
    await _admin(stack, "PUT", "/v1/policies/user/carol", {"max_sessions": 5})
    r = await _post(stack, carol, "/v1/sessions", {"command": ["x"], "priority": 40})
    assert r.status_code == 422, r.text
    # a cap above 50 leaves the default as it is (80 first: the policies are cached for
    # a few seconds, and only a refusal reads them again)
    await _admin(stack, "PATCH", "/v1/policies/user/carol", {"max_priority": 80})
    assert (await stack.submit(carol, command=["x"], priority=80))["priority"] == 80
    assert (await stack.submit(carol, command=["x"]))["priority"] == 50


async def test_the_lower_of_the_user_and_project_cap_applies(stack: Stack) -> None:
    bob = await stack.create_user("bob")
    await _admin(stack, "POST", "/v1/projects", {"name": "ml-a"})
    await _admin(stack, "POST", "/v1/projects/ml-a/members", {"user": "bob"})
    await _admin(stack, "PUT", "/v1/policies/user/bob", {"max_priority": 60})
    await _admin(stack, "PUT", "/v1/policies/project/ml-a", {"max_priority": 40})
    body = {"command": ["x"], "project": "ml-a", "priority": 50}
    r = await _post(stack, bob, "/v1/sessions", body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == "priority 50 is above the highest project ml-a may ask for (40)"
    # the default is lowered to the project's cap inside the project, to bob's outside
    assert (await stack.submit(bob, command=["x"], project="ml-a"))["priority"] == 40
    assert (await stack.submit(bob, command=["x"], priority=60))["priority"] == 60

    # a template run (and so a trigger's) is a create like any other
    template = {"name": "urgent", "session": {**body, "priority": 45, "resources": CPU}}
    r = await _post(stack, bob, "/v1/templates", template)
    assert r.status_code == 201, r.text
    r = await _post(stack, bob, "/v1/templates/urgent/run", {})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == "priority 45 is above the highest project ml-a may ask for (40)"
    plain = {"name": "plain", "session": {"command": ["x"], "project": "ml-a", "resources": CPU}}
    assert (await _post(stack, bob, "/v1/templates", plain)).status_code == 201
    r = await _post(stack, bob, "/v1/templates/plain/run", {})
    assert r.status_code == 201, r.text
    assert r.json()["priority"] == 40


async def test_an_out_of_range_cap_is_a_422_naming_the_field(stack: Stack) -> None:
    async with stack.client() as api:
        for method, value in (("PUT", 101), ("PATCH", -1), ("PATCH", "high")):
            r = await api.request(method, "/v1/policies/user/*", json={"max_priority": value})
            assert r.status_code == 422, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
            assert r.json()["field"] == "max_priority"
        assert (await api.get("/v1/policies")).json() == []  # nothing half-written
        r = await api.put("/v1/policies/user/*", json={"max_priority": 0})
        assert r.status_code == 200, r.text
        assert r.json()["max_priority"] == 0


async def test_the_cli_sets_lists_and_unsets_a_cap(stack: Stack) -> None:
    await stack.create_user("bob")
    shown = await stack.cli("admin", "policies", "set", "user", "bob", "--max-priority", "60")
    rows = {" ".join(line.split()[:-1]): line.split()[-1] for line in shown.splitlines()}
    assert rows["max priority"] == "60"
    listed = await stack.cli("admin", "policies", "ls")
    header, line = listed.splitlines()[:2]
    assert "MAX PRIORITY" in header
    assert line.split()[:2] == ["user", "bob"]
    assert line.split()[-1] == "60"
    (policy,) = json.loads(await stack.cli("admin", "policies", "ls", "-o", "json"))
    assert policy["max_priority"] == 60
    unset = await stack.cli(
        "admin", "policies", "set", "user", "bob", "--unset", "max-priority", "-o", "json"
    )
    assert json.loads(unset)["max_priority"] is None
