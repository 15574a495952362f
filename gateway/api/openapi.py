"""The OpenAPI document, with the limits this gateway's settings set.

Some bounds are the operator's (``JOBGATE_MAX_ARRAY_COUNT``): the models carry the
widest value any gateway accepts, and the document a gateway serves says its own, so a
client (or schemathesis) knows what this one takes.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from gateway.config import GatewaySettings

__all__ = ["install"]


def install(app: FastAPI, settings: GatewaySettings) -> None:
    made = app.openapi  # FastAPI's own, which caches the document on the app

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        schema = made()
        if fresh:
            _limit(schema, "SessionCreate", "count", settings.max_array_count)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _limit(schema: dict[str, Any], model: str, field: str, maximum: int) -> None:
    """Lower *model*.*field*'s ``maximum`` (in every branch of an optional field)."""
    prop = schema["components"]["schemas"][model]["properties"][field]
    for branch in [prop, *prop.get("anyOf", [])]:
        if "maximum" in branch:
            branch["maximum"] = min(branch["maximum"], maximum)
