"""A well-formed request answered by what it meets: 404 for what is not there, 409 for
the state, each a problem naming the field; and inputs that were 500s are refused.

(The request rules themselves are in the OpenAPI document; schemathesis checks that the
server accepts what it allows: test_api_fuzz.py.)
"""

from __future__ import annotations

from typing import Any

import httpx
from harness import Stack


def _problem(r: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = r.json()
    assert body["status"] == status
    assert body["detail"]
    if field is not None:
        assert body["field"] == field, body
    return body


async def test_what_is_not_there_is_404_and_the_state_409(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    async with stack.client(alice) as api:
        _problem(await api.get("/v1/sessions", params={"cursor": "bm9wZQ"}), 404, "cursor")
        r = await api.post("/v1/sessions", json={"command": ["true"], "project": "ghost"})
        _problem(r, 404, "project")

        assert (await api.post("/v1/folders", json={"name": "data"})).status_code == 201
        assert (await api.post("/v1/folders/data/mkdir", json={"path": "d"})).status_code < 300
        _problem(await api.get("/v1/folders/data/files/d"), 409, "path")  # a directory
        r = await api.post("/v1/folders/data/move", json={"source": "d", "target": "d/e"})
        _problem(r, 409, "target")
        r = await api.put("/v1/folders/data/shares/alice", json={"perm": "ro"})
        _problem(r, 409, "user")  # her own
        _problem(await api.put("/v1/folders/data/shares/nobody", json={"perm": "ro"}), 404, "user")
        # nothing was changed by any of them
        assert (await api.get("/v1/folders/data")).json()["shares"] == {}


async def test_inputs_that_crashed_the_gateway_are_refused_with_a_problem(stack: Stack) -> None:
    async with stack.client() as api:
        # a protocol the app table cannot hold (was a 500)
        r = await api.put("/v1/images/example/app:1", json={"service_ports": "web:foo:80"})
        _problem(r, 422, "service_ports")
        # an amount no decimal column holds (was a 500)
        r = await api.put("/v1/policies/user/*", json={"max_slots": {"cpu": 1e300}})
        _problem(r, 422, "max_slots")


async def test_what_the_document_promises_is_what_the_gateway_takes(stack: Stack) -> None:
    async with stack.client() as api:
        # an ISO 8601 duration was in the document, never accepted: now the document says
        # what is ("+10m", "1h30m"), and a JSON number without a fraction is an integer
        _problem(
            await api.post("/v1/sessions", json={"command": ["true"], "starts_at": "P1D"}),
            422,
            "starts_at",
        )
        r = await api.post(
            "/v1/sessions", json={"command": ["true"], "starts_at": "+10m", "priority": 60.0}
        )
        assert r.status_code == 201, r.text
        assert (r.json()["status"], r.json()["priority"]) == ("PENDING", 60)
        schema = (await api.get("/openapi.json")).json()["components"]["schemas"]
        count = schema["SessionCreate"]["properties"]["count"]["anyOf"][0]
        assert count["maximum"] == stack.settings.max_array_count
