"""Idempotency-Key: a retried create returns the same session, never a second one."""

from __future__ import annotations

import asyncio

from harness import Stack

BODY = {"command": ["true"], "resources": {"cpu": "0.1", "mem": "64m"}}


async def test_repeated_key_returns_the_same_session(stack: Stack) -> None:
    async with stack.client() as api:
        first = await api.post("/v1/sessions", json=BODY, headers={"Idempotency-Key": "ci-run-42"})
        again = await api.post("/v1/sessions", json=BODY, headers={"Idempotency-Key": "ci-run-42"})
        other = await api.post("/v1/sessions", json=BODY, headers={"Idempotency-Key": "ci-run-43"})
        listed = (await api.get("/v1/sessions")).json()["items"]
    assert first.status_code == 201
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert other.json()["id"] != first.json()["id"]
    assert len(listed) == 2


async def test_same_key_with_another_body_is_refused(stack: Stack) -> None:
    async with stack.client() as api:
        await api.post("/v1/sessions", json=BODY, headers={"Idempotency-Key": "k"})
        r = await api.post(
            "/v1/sessions", json={**BODY, "command": ["false"]}, headers={"Idempotency-Key": "k"}
        )
    assert r.status_code == 422
    assert r.json()["field"] == "Idempotency-Key"


async def test_concurrent_requests_with_one_key_make_one_session(stack: Stack) -> None:
    async with stack.client() as api:
        responses = await asyncio.gather(
            *(
                api.post("/v1/sessions", json=BODY, headers={"Idempotency-Key": "burst"})
                for _ in range(8)
            )
        )
        listed = (await api.get("/v1/sessions")).json()["items"]
    assert {r.status_code for r in responses} <= {200, 201}
    assert len({r.json()["id"] for r in responses}) == 1
    assert len(listed) == 1


async def test_keys_are_per_user(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    async with stack.client(alice) as a, stack.client() as admin:
        ra = await a.post("/v1/sessions", json=BODY, headers={"Idempotency-Key": "same"})
        rb = await admin.post("/v1/sessions", json=BODY, headers={"Idempotency-Key": "same"})
    assert ra.status_code == rb.status_code == 201
    assert ra.json()["id"] != rb.json()["id"]
