"""Scoped, expiring API keys (``/v1/keys``, ``jobgate keys``): what a key may do is its
scopes until it expires or is revoked, and a key never mints one with more power."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
from harness import Stack
from sqlalchemy import update

from gateway.bootstrap import ensure_admin_key
from gateway.db.engine import create_engine, create_session_factory
from gateway.db.migrate import upgrade_async
from gateway.db.models import ApiKey


def _refused(r: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    for word in words:
        assert word in body["detail"], body
    return body


async def _set_expiry(stack: Stack, key_id: str, at: datetime) -> None:
    engine = create_engine(stack.settings.effective_database_url)
    try:
        async with create_session_factory(engine)() as db, db.begin():
            await db.execute(update(ApiKey).where(ApiKey.id == key_id).values(expires_at=at))
    finally:
        await engine.dispose()


async def _bootstrap_again(stack: Stack) -> str:
    """What ``jobgate admin bootstrap`` does each time it runs: one more admin key."""
    engine = create_engine(stack.settings.effective_database_url)
    try:
        async with create_session_factory(engine)() as db, db.begin():
            return await ensure_admin_key(db)
    finally:
        await engine.dispose()


async def test_a_scoped_key_does_its_scopes_only_until_it_expires_or_is_revoked(
    stack: Stack,
) -> None:
    alice = await stack.create_user("alice")
    async with stack.client(alice) as api:
        r = await api.post(
            "/v1/keys", json={"name": "ci", "scopes": ["sessions"], "expires_in": "30d"}
        )
        assert r.status_code == 201, r.text
        ci = r.json()
        assert ci["user"] == "alice"
        assert ci["scopes"] == ["sessions"]
        assert ci["key"].startswith("jg_")
        assert ci["prefix"] == ci["key"][:9]
        expires = datetime.fromisoformat(ci["expires_at"])
        assert timedelta(days=29) < expires - datetime.now(UTC) <= timedelta(days=30)
        # what is refused, and how: each a 422 naming the field, a taken name a 409
        bad = await api.post("/v1/keys", json={"name": "x", "scopes": ["everything"]})
        assert bad.status_code == 422, bad.text
        assert bad.json()["field"].startswith("scopes")
        bad = await api.post("/v1/keys", json={"name": "x", "expires_in": "30x"})
        assert bad.status_code == 422, bad.text
        assert bad.json()["field"] == "expires_in"
        assert "30d" in bad.json()["detail"]  # the rule in words, not a regex
        past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
        bad = await api.post("/v1/keys", json={"name": "x", "expires_at": past})
        _refused(bad, 422, "in the past")
        assert bad.json()["field"] == "expires_at"
        _refused(await api.post("/v1/keys", json={"name": "ci"}), 409, "'ci'")
        # a user's key never carries the admin scope
        _refused(await api.post("/v1/keys", json={"name": "x", "scopes": ["admin"]}), 403)

    async with stack.client(ci["key"]) as narrow:
        me = (await narrow.get("/v1/users/me")).json()  # any key; the app proxy asks it
        assert (me["name"], me["role"]) == ("alice", "user")
        assert me["key"] == {"scopes": ["sessions"], "expires_at": ci["expires_at"]}
        made = await narrow.post("/v1/sessions", json={"command": ["true"]})
        assert made.status_code == 201, made.text
        r = await narrow.get("/v1/sessions")
        assert _refused(r, 403, "'read' scope")["missing_scope"] == "read"
        assert ci["key"] not in r.text
        _refused(await narrow.post("/v1/folders", json={"name": "f"}), 403, "'folders'")
        # the escalation a stolen narrow key would try: wider scopes, a longer life
        for wider in (["admin"], ["read", "sessions"]):
            r = await narrow.post("/v1/keys", json={"name": "up", "scopes": wider})
            _refused(r, 403, "more scopes than its own (sessions)")
        r = await narrow.post("/v1/keys", json={"name": "up", "expires_in": "never"})
        _refused(r, 403, "outlives")
        r = await narrow.post("/v1/keys", json={"name": "child"})  # same scopes, same expiry
        assert r.status_code == 201, r.text
        child = r.json()
        assert child["scopes"] == ["sessions"]
        assert child["expires_at"] == ci["expires_at"]
        # nor can it revoke a key with more power than its own
        _refused(await narrow.delete("/v1/keys/test"), 403, "within its own scopes")

    async with stack.client(alice) as api:
        me = (await api.get("/v1/users/me")).json()
        assert me["key"] == {
            "scopes": ["read", "sessions", "endpoints", "folders"],
            "expires_at": None,
        }
        listed = {k["name"]: k for k in (await api.get("/v1/keys")).json()}
        assert set(listed) == {"test", "ci", "child"}
        # the older listing (deprecated) answers the same (and keeps revoked keys, below)
        older = {k["name"]: k for k in (await api.get("/v1/users/alice/keys")).json()}
        assert older == listed
        assert all("key" not in k and "key_hash" not in k for k in listed.values())
        assert listed["test"]["scopes"] == ["read", "sessions", "endpoints", "folders"]
        assert listed["test"]["expires_at"] is None  # a key made before scopes: all, ever
        assert listed["ci"]["last_used_at"] is not None  # it was used above
        assert listed["child"]["last_used_at"] is None
        # revocation by name takes effect on the next request
        assert (await api.delete("/v1/keys/child")).status_code == 204
        _refused(await api.delete("/v1/keys/child"), 404, "no key child")
        older = {k["name"]: k for k in (await api.get("/v1/users/alice/keys")).json()}
        assert older["child"]["revoked_at"] is not None
        assert older["child"]["scopes"] == ["sessions"]
    async with stack.client(child["key"]) as revoked:
        _refused(await revoked.post("/v1/sessions", json={"command": ["true"]}), 401, "revoked")

    # an expired key: 401 saying when, never echoing the key
    await _set_expiry(stack, ci["id"], datetime.now(UTC) - timedelta(minutes=1))
    async with stack.client(ci["key"]) as expired:
        r = await expired.post("/v1/sessions", json={"command": ["true"]})
        _refused(r, 401, "expired at")
        assert ci["key"] not in r.text
        assert ci["prefix"] not in r.text
    async with stack.client(alice) as api:  # a revoked name may be taken again
        r = await api.post("/v1/keys", json={"name": "child", "scopes": ["read"]})
        assert r.status_code == 201, r.text


async def test_admins_manage_anyones_keys_and_users_only_their_own(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    await stack.create_user("bob")
    async with stack.client() as admin:
        r = await admin.post(
            "/v1/keys", params={"user": "bob"}, json={"name": "ops", "scopes": ["read"]}
        )
        assert r.status_code == 201, r.text
        bobs = r.json()
        assert bobs["user"] == "bob"
        # bob is no admin: no key of his may carry the scope
        r = await admin.post(
            "/v1/keys", params={"user": "bob"}, json={"name": "x", "scopes": ["admin"]}
        )
        _refused(r, 403, "admin scope")
        names = [k["name"] for k in (await admin.get("/v1/keys?user=bob")).json()]
        assert names == ["ops", "test"]
        assert (await admin.delete("/v1/keys/ops", params={"user": "bob"})).status_code == 204
        r = await admin.post("/v1/keys", json={"name": "reader", "scopes": ["read"]})
        reader = r.json()
        assert reader["scopes"] == ["read"]
    async with stack.client(bobs["key"]) as bob:
        _refused(await bob.get("/v1/users/me"), 401, "revoked")
    async with stack.client(alice) as api:
        for r in (
            await api.get("/v1/keys", params={"user": "bob"}),
            await api.post("/v1/keys", params={"user": "bob"}, json={"name": "x"}),
            await api.delete("/v1/keys/test", params={"user": "bob"}),
        ):
            _refused(r, 403, "only admins manage other users' keys")
    # an admin's key without the admin scope acts as a user's
    async with stack.client(reader["key"]) as admin:
        _refused(await admin.get("/v1/users"), 403, "'admin' scope")
        # the app proxy asks /v1/users/me who a key is: no admin through this one
        assert (await admin.get("/v1/users/me")).json()["role"] == "user"
        r = await admin.get("/v1/keys", params={"user": "bob"})
        _refused(r, 403, "only admins")
        assert (await admin.get("/v1/nodes")).status_code == 200
    # bootstrapping again names its key anew (names are unique per user)
    async with stack.client(await _bootstrap_again(stack)) as again:
        names = [k["name"] for k in (await again.get("/v1/keys")).json()]
    assert names == ["bootstrap", "bootstrap-2", "reader"]


async def test_jobgate_keys_create_ls_revoke(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    key = await stack.cli(
        "keys", "create", "laptop", "--scope", "read", "--scope", "folders",
        "--expires", "12h", key=alice,
    )  # fmt: skip
    made = key.strip()
    assert made.startswith("jg_")
    listing = await stack.cli("keys", "ls", key=made)
    lines = listing.splitlines()
    assert lines[0].split() == ["NAME", "SCOPES", "EXPIRES", "LAST", "USED", "PREFIX"]
    row = next(line.split() for line in lines if line.startswith("laptop"))
    assert row[1] == "read,folders"
    assert row[3] != "never"
    assert made not in listing
    await stack.cli("keys", "revoke", "laptop", key=alice)
    async with stack.client(made) as gone:
        _refused(await gone.get("/v1/keys"), 401, "revoked")


async def test_keys_made_before_scopes_keep_working_with_names_of_their_own(
    empty_pg: str,
) -> None:
    url = "postgresql+asyncpg://" + empty_pg.split("://", 1)[1]
    await upgrade_async(url, "0017")
    conn = await asyncpg.connect(empty_pg)
    try:
        await conn.execute("INSERT INTO users (id, name, role, created_at, disabled) VALUES "
                           "('u1', 'ann', 'user', now(), false)")  # fmt: skip
        for i, name in enumerate(["", "", "bootstrap", "bootstrap"]):
            await conn.execute(
                "INSERT INTO api_keys (id, user_id, name, key_hash, prefix, created_at) "
                f"VALUES ('k{i}', 'u1', $1, 'h{i}', 'jg_{i}', now() + interval '{i} s')",
                name,
            )
        await upgrade_async(url)
        rows = await conn.fetch("SELECT id, name, scopes, expires_at FROM api_keys ORDER BY id")
    finally:
        await conn.close()
    assert [r["name"] for r in rows] == ["default", "default-jg_1", "bootstrap", "bootstrap-jg_3"]
    assert all(r["scopes"] is None and r["expires_at"] is None for r in rows)
