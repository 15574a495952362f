"""The OpenAPI document generated clients read: one tag per route, ids like sessions-create."""

from __future__ import annotations

import re

from harness import Stack


async def test_every_operation_has_one_tag_and_a_tag_prefixed_id(stack: Stack) -> None:
    async with stack.client("") as anon:
        spec = (await anon.get("/openapi.json")).json()
    seen = set()
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            assert len(op["tags"]) == 1, (method, path)
            tag = op["tags"][0]
            assert re.fullmatch(rf"{tag}-[a-z][a-z-]*", op["operationId"]), op["operationId"]
            assert op["operationId"] not in seen
            seen.add(op["operationId"])
    assert {
        "sessions-create",
        "sessions-list",
        "sessions-get",
        "sessions-terminate",
        "logs-get",
        "nodes-list",
        "health-get",
    } <= seen
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
