"""Every pattern a route checks has its rule in words (``gateway/api/rules.py``), so a
problem body never shows a regex; and every rule in words belongs to a pattern in use."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import TypeAdapter

from gateway.api.rules import RULES
from gateway.app import create_app
from gateway.config import GatewaySettings


def _routes(routes: list[Any]) -> Iterator[Any]:
    for route in routes:
        inner = getattr(route, "original_router", None)  # an included router
        if inner is not None:
            yield from _routes(inner.routes)
        elif hasattr(route, "dependant"):
            yield route


def _patterns(schema: Any, found: dict[str, str], where: str) -> None:
    if isinstance(schema, dict):
        if schema.get("type") == "str" and "pattern" in schema:
            found.setdefault(schema["pattern"], where)
        for value in schema.values():
            _patterns(value, found, where)
    elif isinstance(schema, list | tuple):
        for value in schema:
            _patterns(value, found, where)


def checked_patterns() -> dict[str, str]:
    """pattern -> a route and parameter that checks it (pydantic's core schemas)."""
    found: dict[str, str] = {}
    for route in _routes(create_app(GatewaySettings()).routes):
        deps = [route.dependant]
        while deps:
            dep = deps.pop()
            deps.extend(dep.dependencies)
            for param in dep.path_params + dep.query_params + dep.header_params + dep.body_params:
                where = f"{route.path}: {param.name}"
                for meta in param.field_info.metadata:
                    if getattr(meta, "pattern", None):
                        found.setdefault(meta.pattern, where)
                core = TypeAdapter(param.field_info.annotation).core_schema
                _patterns(core, found, where)
    return found


def test_every_pattern_a_route_checks_has_its_rule_in_words() -> None:
    checked = checked_patterns()
    assert len(checked) > 10  # the walk found the routes
    missing = {p: where for p, where in checked.items() if p not in RULES}
    assert not missing, f"patterns without words in gateway/api/rules.py: {missing}"
    unused = set(RULES) - set(checked)
    assert not unused, f"rules in words for no pattern in use: {unused}"
