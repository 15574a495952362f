"""Session arrays (``count``): one request, N sessions, all or none, idempotent.

Also the API key cache the hot create path leans on: a key revoked through the gateway
fails on the very next request even while it is cached.
"""

from __future__ import annotations

import asyncio

from harness import Stack

BODY = {"command": ["true"], "resources": {"cpu": "0.1", "mem": "64m"}}


async def test_an_array_is_created_whole_listed_together_and_replayed_by_its_key(
    stack: Stack,
) -> None:
    stack.settings.max_array_count = 500
    async with stack.client() as api:
        r = await api.post(
            "/v1/sessions",
            json={**BODY, "name": "grid", "count": 400, "env": {"RATE": "0.1"}},
            headers={"Idempotency-Key": "grid-1"},
        )
        assert r.status_code == 201, r.text
        first = r.json()
        assert (first["array_id"], first["array_index"], first["array_size"]) == (
            first["id"],
            0,
            400,
        )
        assert first["name"] == "grid-0"
        assert first["env"] == {
            "RATE": "0.1",
            "JOBGATE_ARRAY_ID": first["id"],
            "JOBGATE_ARRAY_INDEX": "0",
            "JOBGATE_ARRAY_SIZE": "400",
        }
        assert r.headers["location"] == f"/v1/sessions/{first['id']}"

        # every session is there once, with its own index, name and environment
        members: list[dict[str, object]] = []
        params: dict[str, str | int] = {"array": first["array_id"], "limit": 500}
        page = (await api.get("/v1/sessions", params=params)).json()
        members = page["items"]
        assert page["next_cursor"] is None
        assert sorted(int(str(m["array_index"])) for m in members) == list(range(400))
        for m in members:
            env = m["env"]
            assert isinstance(env, dict)
            assert env["JOBGATE_ARRAY_INDEX"] == str(m["array_index"])
            assert m["name"] == f"grid-{m['array_index']}"
            assert m["status"] == "PENDING"
        one = (await api.get(f"/v1/sessions/{members[7]['id']}")).json()
        assert one["array_id"] == first["id"]
        assert [h["to_status"] for h in one["history"]] == ["PENDING"]
        assert len(one["kernels"]) == 1

        # the same key answers with the same first session and creates nothing
        again = await api.post(
            "/v1/sessions",
            json={**BODY, "name": "grid", "count": 400, "env": {"RATE": "0.1"}},
            headers={"Idempotency-Key": "grid-1"},
        )
        assert again.status_code == 200
        assert again.json()["id"] == first["id"]
        changed = await api.post(
            "/v1/sessions",
            json={**BODY, "name": "grid", "count": 401, "env": {"RATE": "0.1"}},
            headers={"Idempotency-Key": "grid-1"},
        )
        assert changed.status_code == 422
        assert changed.json()["field"] == "Idempotency-Key"

        # all or nothing: one taken name (grid-3 lives) refuses the whole array
        clash = await api.post("/v1/sessions", json={**BODY, "name": "grid", "count": 5})
        assert clash.status_code == 409
        assert clash.json()["field"] == "name"
        assert "grid-" in clash.json()["detail"]

        # over the operator's limit: 422 naming the field, nothing written
        over = await api.post("/v1/sessions", json={**BODY, "count": 501})
        assert over.status_code == 422
        assert over.json()["field"] == "count"
        assert "501" in over.json()["detail"]
        assert "500" in over.json()["detail"]
        zero = await api.post("/v1/sessions", json={**BODY, "count": 0})
        assert zero.status_code == 422

        total = (await api.get("/v1/sessions", params={"limit": 500})).json()
        assert len(total["items"]) == 400  # still only the first array (one page of 500)

        # concurrent creates share transactions (group commit): one that conflicts
        # (a duplicate name) fails alone, the others in its batch are created
        bodies = [{**BODY, "name": f"c{i}"} for i in range(16)] + [{**BODY, "name": "c3"}]
        answers = await asyncio.gather(*(api.post("/v1/sessions", json=b) for b in bodies))
        codes = sorted(a.status_code for a in answers)
        assert codes == [201] * 16 + [409], [a.text for a in answers if a.status_code != 201]
        named = (await api.get("/v1/sessions", params={"name": "c3"})).json()["items"]
        assert len(named) == 1


async def test_an_array_must_fit_the_pending_quota_and_the_nodes_whole(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    await stack.start_worker("n1", worker_cpu="4", worker_mem="8g")
    async with stack.client() as admin:
        r = await admin.put("/v1/policies/user/alice", json={"max_pending": 10})
        assert r.status_code == 200, r.text
    async with stack.client(alice) as api:
        # 8 fit the quota of 10 pending; 3 more would make 11: none of them is created
        hold = {**BODY, "starts_at": "+1h"}  # pending for an hour: they count
        ok = await api.post("/v1/sessions", json={**hold, "count": 8})
        assert ok.status_code == 201, ok.text
        refused = await api.post("/v1/sessions", json={**hold, "count": 3})
        assert refused.status_code == 429, refused.text
        assert "8 of 10 pending" in refused.json()["detail"]
        # infeasible on every node: refused whole
        big = await api.post("/v1/sessions", json={**BODY, "count": 2, "resources": {"cpu": "64"}})
        assert big.status_code == 422
        assert big.json()["field"] == "resources.cpu"
        listed = (await api.get("/v1/sessions")).json()["items"]
        assert len(listed) == 8
        assert {s["array_id"] for s in listed} == {ok.json()["id"]}


async def test_a_revoked_key_fails_at_once_even_while_cached(stack: Stack) -> None:
    stack.settings.api_key_cache_s = 60.0  # the production default caches; tests turn it off
    await stack.stop_gateway()
    await stack.start_gateway()
    key = await stack.create_user("bob")
    async with stack.client(key) as bob, stack.client() as admin:
        assert (await bob.get("/v1/sessions")).status_code == 200  # now cached
        assert (await bob.get("/v1/sessions")).status_code == 200
        keys = (await admin.get("/v1/users/bob/keys")).json()
        r = await admin.delete(f"/v1/users/bob/keys/{keys[0]['id']}")
        assert r.status_code == 204
        after = await bob.get("/v1/sessions")
    assert after.status_code == 401
    assert "revoked" in after.json()["detail"]
