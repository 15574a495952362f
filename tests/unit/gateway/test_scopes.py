"""Every route of the app has its row in the one table of key scopes
(``gateway/api/scopes.py``), so a new route cannot forget to say what a key needs for
it; and the table agrees with how each route authenticates. Also the pure rules of
keys: scopes, lifetimes, what a key may mint, expiry through the cache."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Mount

from gateway.api import deps
from gateway.api.scopes import ANY_KEY, NO_KEY, READ, ROUTE_SCOPES, required
from gateway.app import create_app
from gateway.auth import KeyCache, Principal
from gateway.config import GatewaySettings
from gateway.domain.errors import Invalid, Unauthenticated
from gateway.domain.keys import ADMIN, SCOPES, duration, outlives, parse_scopes, within


def _routes(routes: list[Any]) -> Iterator[Any]:
    for route in routes:
        inner = getattr(route, "original_router", None)  # an included router
        if inner is not None:
            yield from _routes(inner.routes)
        elif not isinstance(route, Mount):  # static files: no code of ours answers
            yield route


def _calls(route: APIRoute) -> set[Any]:
    found: set[Any] = set()
    todo = [route.dependant]
    while todo:
        dep = todo.pop()
        found.add(dep.call)
        todo.extend(dep.dependencies)
    return found


ROUTES = list(_routes(create_app(GatewaySettings()).routes))


def test_every_route_of_the_app_has_a_scope_row_and_every_row_a_route() -> None:
    seen = {f"{m} {r.path}" for r in ROUTES for m in r.methods}
    assert len(seen) > 100  # the walk found the routes
    assert sorted(seen - ROUTE_SCOPES.keys()) == [], "routes without a row in ROUTE_SCOPES"
    assert sorted(ROUTE_SCOPES.keys() - seen) == [], "rows for routes that are gone"
    assert set(ROUTE_SCOPES.values()) == {*SCOPES, ANY_KEY, NO_KEY}


def test_the_table_agrees_with_how_each_route_authenticates() -> None:
    wrong = []
    for route in ROUTES:
        if not isinstance(route, APIRoute):
            continue
        calls = _calls(route)
        for method in route.methods:
            scope = required(method, route.path)
            if (deps._principal in calls) != (scope is not NO_KEY):
                wrong.append(f"{method} {route.path}: {scope} (takes a key: not NO_KEY)")
            if deps._admin in calls and scope != ADMIN:
                wrong.append(f"{method} {route.path}: an admin route needs the admin scope")
            # a read key reads; the exceptions: HEADs that are steps of a write (tus, blobs)
            writes = route.path.startswith("/v1/uploads/") or "/blobs/" in route.path
            reads = method in ("GET", "HEAD") and not writes
            if reads and scope not in (READ, ANY_KEY, NO_KEY, ADMIN):
                wrong.append(f"{method} {route.path}: reads need the read scope")
    assert wrong == []


def test_a_route_missing_from_the_table_needs_admin() -> None:
    assert required("GET", "/v1/no-such-route") == ADMIN


def test_scopes_and_lifetimes_are_checked() -> None:
    assert parse_scopes(["read", "sessions"]) == {"read", "sessions"}
    with pytest.raises(Invalid, match="unknown scope 'everything'") as bad:
        parse_scopes(["read", "everything"])
    assert bad.value.field == "scopes"
    with pytest.raises(Invalid, match="at least one"):
        parse_scopes([])
    assert duration("30d") == timedelta(days=30)
    assert duration("90m") == timedelta(minutes=90)
    assert duration("never") is None
    assert duration("3600s") == timedelta(hours=1)
    for text in ("0d", "30", "d", "1y", "-1d", "30 d", "99999w"):
        with pytest.raises(Invalid, match="or never") as bad:
            duration(text)
        assert bad.value.field == "expires_in"
    # no more power than the minting key: scopes within, expiry no later
    everything = frozenset(SCOPES)
    assert within(None, None)
    assert within(None, everything)
    assert within(frozenset({"read", "sessions"}), frozenset({"read"}))
    assert not within(frozenset({"sessions"}), frozenset({"admin"}))
    assert not within(frozenset({"sessions"}), None)  # a narrow key mints no full one
    soon = datetime(2030, 1, 1, tzinfo=UTC)
    assert not outlives(None, None)
    assert not outlives(soon, None)
    assert outlives(None, soon)
    assert outlives(soon + timedelta(seconds=1), soon)
    assert not outlives(soon, soon)


def test_a_cached_key_still_expires_and_its_use_is_written_once_a_minute() -> None:
    cache = KeyCache(ttl=60)
    gone = datetime.now(UTC) - timedelta(seconds=1)
    cache.put("h", Principal("u", "ann", "user", frozenset({"read"}), "k1", gone))
    with pytest.raises(Unauthenticated, match="expired at"):
        cache.get("h")
    assert cache.due("k1")
    assert not cache.due("k1")  # the next minute's uses write nothing
    assert cache.due("k2")


def test_an_admin_acts_as_one_only_through_a_key_with_the_admin_scope() -> None:
    assert Principal("u", "root", "admin").is_admin  # a key without scopes
    assert not Principal("u", "root", "admin", frozenset({"read", "sessions"})).is_admin
    assert not Principal("u", "ann", "user").is_admin
