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


async def test_a_groups_scheduler_is_typed_by_the_plugins_the_gateway_loaded(stack: Stack) -> None:
    async with stack.client("") as anon:
        spec = (await anon.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    ref = {"$ref": "#/components/schemas/SchedulerConfig"}
    assert schemas["GroupSet"]["properties"]["scheduler"]["$ref"] == ref["$ref"]
    assert ref in schemas["GroupPatch"]["properties"]["scheduler"]["anyOf"]
    config = schemas["SchedulerConfig"]
    assert config["additionalProperties"] is False
    sequencer = config["properties"]["sequencer"]["anyOf"]
    assert sequencer[0] == {
        "type": "string",
        "enum": ["drf", "fair-share", "fifo", "heuristic-fifo", "lifo"],
    }
    drf = schemas["SchedulerConfig.sequencer.drf"]
    assert drf["properties"]["level"]["enum"] == ["project-user", "user", "project"]
