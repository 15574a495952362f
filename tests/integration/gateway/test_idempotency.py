"""Idempotency-Key: a retried create returns the same session, never a second one.

On PostgreSQL and on the embedded SQLite. A client that retries after a timeout sends
the same request again while the first may still be in flight, possibly to another
gateway process: the bursts below go to two gateway apps on one database at once, and
every answer must be the first request's (201 once, 200 replays of it), never a 500,
a 409 about the name the first one took, or a second row.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from harness import Stack, free_port, serve_gateway

BODY = {"command": ["true"], "resources": {"cpu": "0.1", "mem": "64m"}}
ENDPOINT = {"name": "demo", "port": 8000, "command": ["serve"], "resources": {"cpu": "0.1"}}
BURST = 8  # concurrent requests with one key, half to each gateway
ROUNDS = 3  # bursts per case, each with its own key (a race need not show every time)


@asynccontextmanager
async def second_gateway(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    """Another gateway app (its own engine, pool and group-commit writer, as another
    process has) on the stack's database, and an admin client for it."""
    port = free_port()
    server, task = await serve_gateway(stack.settings, port)
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {stack.admin_key}"},
            timeout=30,
        ) as client:
            yield client
    finally:
        server.should_exit = True
        await task


async def burst(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient], path: str, body: dict[str, Any], key: str
) -> list[httpx.Response]:
    return list(
        await asyncio.gather(
            *(
                clients[i % 2].post(path, json=body, headers={"Idempotency-Key": key})
                for i in range(BURST)
            )
        )
    )


def one_answer(responses: list[httpx.Response]) -> str:
    """All answers are the first create's: one 201, the rest 200 replays of it."""
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * (len(responses) - 1) + [201], [
        (r.status_code, r.text[:300]) for r in responses if r.status_code not in (200, 201)
    ]
    replays = [r for r in responses if r.status_code == 200]
    assert all(r.headers["idempotent-replayed"] == "true" for r in replays)
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1, ids
    return ids.pop()


async def test_repeated_key_returns_the_same_session(any_stack: Stack) -> None:
    async with any_stack.client() as api:
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


async def test_same_key_with_another_body_is_refused(any_stack: Stack) -> None:
    async with any_stack.client() as api:
        await api.post("/v1/sessions", json=BODY, headers={"Idempotency-Key": "k"})
        r = await api.post(
            "/v1/sessions", json={**BODY, "command": ["false"]}, headers={"Idempotency-Key": "k"}
        )
    assert r.status_code == 422
    assert r.json()["field"] == "Idempotency-Key"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/sessions", BODY),
        ("/v1/sessions", {**BODY, "count": 3}),
        ("/v1/endpoints", ENDPOINT),
    ],
    ids=["session", "array", "endpoint"],
)
async def test_an_empty_key_is_refused_and_creates_nothing(
    any_stack: Stack, path: str, body: dict[str, Any]
) -> None:
    """An empty key was stored, yet never looked up: the second create with it was a
    500 from the unique index (HTTP strips spaces: a key of spaces is empty too)."""
    async with any_stack.client() as api:
        answers = [
            await api.post(path, json={**body, "name": f"e{i}"}, headers={"Idempotency-Key": key})
            for i, key in enumerate(["", ""])
        ]
        sessions = (await api.get("/v1/sessions")).json()["items"]
        endpoints = (await api.get("/v1/endpoints")).json()
    for r in answers:
        assert r.status_code == 422, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["field"] == "idempotency-key"
    assert sessions == endpoints == []


async def test_concurrent_same_key_sessions_get_the_first_answer(any_stack: Stack) -> None:
    """Plain, named (the name is taken by the first: the others still get its answer,
    not a 409) and array creates; two gateways, one key per burst."""
    async with any_stack.client() as api, second_gateway(any_stack) as other:
        made: list[str] = []
        for case, body in [
            ("plain", BODY),
            ("named", {**BODY, "name": "nightly"}),
            ("array", {**BODY, "count": 3}),
        ]:
            for n in range(ROUNDS):
                named = {**body, "name": f"{body['name']}-{n}"} if "name" in body else body
                made.append(
                    one_answer(await burst((api, other), "/v1/sessions", named, f"{case}-{n}"))
                )
        listed = (await api.get("/v1/sessions", params={"limit": 200})).json()["items"]
    assert len(made) == len(set(made)) == 3 * ROUNDS
    assert len(listed) == 2 * ROUNDS + 3 * ROUNDS  # the arrays: three sessions each


async def test_concurrent_same_key_endpoints_get_the_first_answer(any_stack: Stack) -> None:
    async with any_stack.client() as api, second_gateway(any_stack) as other:
        made = [
            one_answer(
                await burst(
                    (api, other), "/v1/endpoints", {**ENDPOINT, "name": f"demo-{n}"}, f"ep-{n}"
                )
            )
            for n in range(ROUNDS)
        ]
        listed = (await api.get("/v1/endpoints")).json()
    assert sorted(e["id"] for e in listed) == sorted(made)


async def test_concurrent_same_key_template_runs_get_the_first_answer(any_stack: Stack) -> None:
    async with any_stack.client() as api, second_gateway(any_stack) as other:
        r = await api.post("/v1/templates", json={"name": "nightly", "session": BODY})
        assert r.status_code == 201, r.text
        made = [
            one_answer(await burst((api, other), "/v1/templates/nightly/run", {}, f"run-{n}"))
            for n in range(ROUNDS)
        ]
        listed = (await api.get("/v1/sessions")).json()["items"]
    assert sorted(s["id"] for s in listed) == sorted(made)


async def test_keys_are_per_user(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    async with stack.client(alice) as a, stack.client() as admin:
        ra = await a.post("/v1/sessions", json=BODY, headers={"Idempotency-Key": "same"})
        rb = await admin.post("/v1/sessions", json=BODY, headers={"Idempotency-Key": "same"})
    assert ra.status_code == rb.status_code == 201
    assert ra.json()["id"] != rb.json()["id"]
