"""Bearer keys, roles, and isolation: a user sees and touches only their own sessions."""

from __future__ import annotations

from harness import Stack


async def test_unauthenticated_requests_get_401(stack: Stack) -> None:
    async with stack.client("") as anon:
        r = await anon.get("/v1/sessions")
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.headers["content-type"] == "application/problem+json"
    async with stack.client("jg_" + "x" * 43) as wrong:
        assert (await wrong.get("/v1/sessions")).status_code == 401
    async with stack.client("not-a-key") as malformed:
        assert (await malformed.get("/v1/sessions")).status_code == 401


async def test_health_needs_no_key(stack: Stack) -> None:
    async with stack.client("") as anon:
        r = await anon.get("/healthz")
    assert r.json() == {"status": "ok", "database": "ok", "redis": "ok"}


async def test_users_see_only_their_own_sessions(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    mine = await stack.submit(alice, command=["true"])
    async with stack.client(bob) as api:
        assert (await api.get(f"/v1/sessions/{mine['id']}")).status_code == 404
        assert (await api.delete(f"/v1/sessions/{mine['id']}")).status_code == 404
        assert (await api.get(f"/v1/sessions/{mine['id']}/logs")).status_code == 404
        assert (await api.get("/v1/sessions")).json()["items"] == []
        # "all" is for admins only: a user still sees their own
        assert (await api.get("/v1/sessions", params={"all": True})).json()["items"] == []
    async with stack.client(alice) as api:
        items = (await api.get("/v1/sessions")).json()["items"]
        assert [s["id"] for s in items] == [mine["id"]]
        assert items[0]["owner"] == "alice"
    async with stack.client() as admin:
        assert (await admin.get(f"/v1/sessions/{mine['id']}")).status_code == 200
        every = (await admin.get("/v1/sessions", params={"all": True})).json()["items"]
        assert [s["id"] for s in every] == [mine["id"]]
    # bob cannot cancel alice's session: it is still pending
    assert (await stack.get(mine["id"]))["status"] == "PENDING"


async def test_only_admins_manage_users_and_keys(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    async with stack.client(alice) as api:
        assert (await api.post("/v1/users", json={"name": "eve"})).status_code == 403
        assert (await api.post("/v1/users/admin/keys", json={})).status_code == 403
        own = await api.post("/v1/users/alice/keys", json={"name": "laptop"})
        assert own.status_code == 201
        me = (await api.get("/v1/users/me")).json()
    assert me["name"] == "alice"
    assert me["role"] == "user"
    async with stack.client(own.json()["key"]) as api:
        assert (await api.get("/v1/users/me")).json()["name"] == "alice"
    async with stack.client() as admin:
        dup = await admin.post("/v1/users", json={"name": "alice"})
    assert dup.status_code == 409


async def test_node_endpoints_refuse_user_keys(stack: Stack) -> None:
    s = await stack.submit(command=["true"])
    async with stack.client() as admin:
        r = await admin.post(
            f"/v1/internal/kernels/{s['kernels'][0]['id']}/logs",
            json={"session_id": s["id"], "chunks": []},
        )
    assert r.status_code == 401
