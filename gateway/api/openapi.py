"""The OpenAPI document, with the limits this gateway's settings and plugins set.

Some bounds are the operator's (``JOBGATE_MAX_ARRAY_COUNT``): the models carry the
widest value any gateway accepts, and the document a gateway serves says its own, so a
client (or schemathesis) knows what this one takes.

A resource group's ``scheduler`` is typed by the scheduling plugins this gateway loads
(built-in and installed): which names exist and what options each takes
(``plugins.scheduling.schema``), as the schema ``SchedulerConfig`` the group bodies
refer to.

An error body is the schema ``Problem`` (``gateway.api.problems``), referred to by every
error answer, so a generated client has one typed error model.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from gateway.api import problems
from gateway.config import GatewaySettings
from plugins.scheduling.pipeline import available
from plugins.scheduling.schema import scheduler_schema

__all__ = ["install"]

#: request bodies whose ``scheduler`` is a configuration -> whether it may be null
_SCHEDULER_BODIES = {"GroupSet": False, "GroupPatch": True}


def install(app: FastAPI, settings: GatewaySettings) -> None:
    made = app.openapi  # FastAPI's own, which caches the document on the app

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        schema = made()
        if fresh:
            schema["components"]["schemas"].update(problems.schemas())
            _limit(schema, "SessionCreate", "count", settings.max_array_count)
            _scheduler(schema)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _limit(schema: dict[str, Any], model: str, field: str, maximum: int) -> None:
    """Lower *model*.*field*'s ``maximum`` (in every branch of an optional field)."""
    prop = schema["components"]["schemas"][model]["properties"][field]
    for branch in [prop, *prop.get("anyOf", [])]:
        if "maximum" in branch:
            branch["maximum"] = min(branch["maximum"], maximum)


def _scheduler(schema: dict[str, Any]) -> None:
    """Type the group bodies' ``scheduler`` by the plugins loaded now."""
    components = schema["components"]["schemas"]
    named = scheduler_schema(available())
    components.update(named)
    ref = {"$ref": "#/components/schemas/SchedulerConfig"}
    for model, nullable in _SCHEDULER_BODIES.items():
        properties = components[model]["properties"]
        kept = {
            k: v
            for k, v in properties["scheduler"].items()
            if k in ("description", "title", "default")
        }
        typed = {"anyOf": [ref, {"type": "null"}]} if nullable else ref
        properties["scheduler"] = {**kept, **typed}
