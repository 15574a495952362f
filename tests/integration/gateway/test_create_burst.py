"""Creates under a burst (issue 17): concurrent requests share the reads every create
makes (``services/lookups.py``) and the answer is serialized once (``api/render.py``).
What a user must not notice: each request still gets its own group check, automount
folders and pending quota; what was committed just before a create is seen by it; a
failed shared read fails every request that waited for it, none hangs; the answer is
the session as ``GET`` shows it. On PostgreSQL and on SQLite.
"""

from __future__ import annotations

import asyncio
from typing import Any

from harness import Stack, free_port

from gateway.db.engine import create_engine, create_session_factory, unavailable
from gateway.services.lookups import Ask, Lookups

LATER: dict[str, Any] = {"command": ["true"], "starts_at": "+1h"}  # stays PENDING


def mounted(session: dict[str, Any]) -> list[str]:
    return [f["name"] for f in session["folders"] if f["automount"]]


async def test_a_burst_of_creates_keeps_each_requests_own_checks(any_stack: Stack) -> None:
    stack = any_stack
    keys = [await stack.create_user(f"burst{i}") for i in range(3)]
    async with stack.client() as admin:
        r = await admin.put("/v1/policies/user/burst1", json={"max_pending": 5})
        assert r.status_code == 200, r.text
        for i, key in enumerate(keys[:2]):  # burst2 has no dot-folder
            async with stack.client(key) as api:
                r = await api.post("/v1/folders", json={"name": f".tools{i}"})
                assert r.status_code == 201, r.text

        async def create(key: str, **extra: Any) -> Any:
            async with stack.client(key) as api:
                return await api.post("/v1/sessions", json={**LATER, **extra})

        burst = [create(key) for key in keys for _ in range(4)]
        burst.append(create(keys[0], resource_group="nowhere"))
        answers = await asyncio.gather(*burst)
        *accepted, refused = answers
        assert [r.status_code for r in accepted] == [201] * 12, [r.text for r in accepted]
        by_owner: dict[str, set[tuple[str, ...]]] = {}
        for r in accepted:
            by_owner.setdefault(r.json()["owner"], set()).add(tuple(mounted(r.json())))
        assert by_owner == {"burst0": {(".tools0",)}, "burst1": {(".tools1",)}, "burst2": {()}}
        assert refused.status_code == 404  # a group that does not exist
        assert refused.json()["field"] == "resource_group"

        # the pending quota counts each user's own sessions (burst1 has 4 of 5)
        first, second = await asyncio.gather(create(keys[1]), create(keys[2]))
        assert (first.status_code, second.status_code) == (201, 201)
        over = await create(keys[1])
        assert over.status_code == 429
        assert "already has 5 of 5 pending" in over.json()["detail"]


async def test_a_create_sees_what_was_committed_just_before(any_stack: Stack) -> None:
    key = await any_stack.create_user("fresh")
    async with any_stack.client() as admin, any_stack.client(key) as api:
        assert (await api.post("/v1/sessions", json={**LATER, "resource_group": "new"})).json()[
            "field"
        ] == "resource_group"
        assert (await admin.put("/v1/resource-groups/new", json={})).status_code == 200
        r = await api.post("/v1/sessions", json={**LATER, "resource_group": "new"})
        assert r.status_code == 201, r.text

        assert (await api.post("/v1/folders", json={"name": ".cache"})).status_code == 201
        r = await api.post("/v1/sessions", json=LATER)
        assert mounted(r.json()) == [".cache"]
        assert (await api.delete(r.headers["location"])).status_code == 202  # unmounts it
        assert (await api.delete("/v1/folders/.cache")).status_code == 200
        r = await api.post("/v1/sessions", json=LATER)
        assert mounted(r.json()) == []


async def test_the_answer_to_a_create_is_the_session_as_get_shows_it(any_stack: Stack) -> None:
    async with any_stack.client() as api:
        r = await api.post(
            "/v1/sessions",
            json={**LATER, "name": "same", "env": {"A": "é"}, "callback_url": None},
            headers={"Idempotency-Key": "answer-1"},
        )
        assert r.status_code == 201, r.text
        assert r.headers["content-type"] == "application/json"
        created = r.json()
        assert r.headers["location"] == f"/v1/sessions/{created['id']}"
        shown = (await api.get(r.headers["location"])).json()
        for view in (created, shown):  # history: GET only; the scheduler's latest word
            view.pop("history")
            view.pop("pending_reason")
        assert created == shown
        again = await api.post(
            "/v1/sessions",
            json={**LATER, "name": "same", "env": {"A": "é"}, "callback_url": None},
            headers={"Idempotency-Key": "answer-1"},
        )
        assert (again.status_code, again.headers["idempotent-replayed"]) == (200, "true")
        assert again.json()["id"] == created["id"]


async def test_a_failed_shared_read_fails_every_waiting_request() -> None:
    engine = create_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/none")
    lookups = Lookups(create_session_factory(engine))
    try:
        asks = [Ask(f"user{i}", "default", automount=True, pending=True) for i in range(8)]
        results = await asyncio.gather(*(lookups.fetch(a) for a in asks), return_exceptions=True)
        assert all(unavailable(r) for r in results), results  # each answered 503
        (again,) = await asyncio.gather(lookups.fetch(asks[0]), return_exceptions=True)
        assert unavailable(again), again  # the next request is read again, not left waiting
    finally:
        await engine.dispose()
