"""Where requests go: routes from Redis, invalidation by pub/sub, prefixes, ended sessions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from proxy_harness import (
    OWNER,
    SECRET,
    SESSION,
    AppServer,
    Proxy,
    ProxyFactory,
    problem,
    running_app,
)
from waiting import until

from contract.keys import ROUTE_CHANNEL, activity_key, route_key
from contract.routes import AppRoute, RouteRecord, end_route, write_route
from contract.tokens import issue_app_token

pytestmark = pytest.mark.timeout(60)


def seen_by_app(body: bytes) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(body)
    data["headers"] = {k.lower(): v for k, v in data["headers"]}
    return data


@pytest.mark.parametrize(
    ("name", "app", "path", "upstream_path"),
    [
        ("prefix stripped", "echo", "/lab/tree?x=1", "/lab/tree?x=1"),
        (
            "prefix kept (Jupyter base_url)",
            "jupyter",
            "/api/kernels",
            f"/s/{SESSION}/jupyter/api/kernels",
        ),
        ("encoded path kept as sent", "echo", "/files/a%20b%2Fc.ipynb", "/files/a%20b%2Fc.ipynb"),
        ("root", "echo", "/", "/"),
    ],
)
async def test_paths_reach_the_app(
    proxy: Proxy, name: str, app: str, path: str, upstream_path: str
) -> None:
    async with proxy.client(cookies=proxy.cookie()) as client:
        response = await client.get(f"/s/{SESSION}/{app}{path}")
    assert response.status_code == 200, name
    assert seen_by_app(response.content)["raw_path"] == upstream_path, name


async def test_forwarded_headers_and_public_host(proxy: Proxy) -> None:
    headers = {
        "X-Forwarded-For": "6.6.6.6",
        "Host": "apps.example.org:8443",
        "Connection": "keep-alive, X-Secret-Hop",
        "X-Secret-Hop": "1",
        "Origin": "http://apps.example.org:8443",
    }
    # the gateway console's sign-in rides along when both share a host (jobgate up)
    cookies = proxy.cookie() | {"jobgate_console": "console-sign-in", "app_pref": "1"}
    async with proxy.client(cookies=cookies, headers=headers) as client:
        response = await client.get(f"/s/{SESSION}/jupyter/lab")
    seen = seen_by_app(response.content)["headers"]
    assert seen["cookie"] == "app_pref=1"  # neither jobgate cookie reaches the app
    assert seen["host"] == "apps.example.org:8443"
    assert seen["x-forwarded-host"] == "apps.example.org:8443"
    assert seen["x-forwarded-for"] == "127.0.0.1"  # the spoofed hop is not believed
    assert seen["x-forwarded-proto"] == "http"
    assert seen["x-forwarded-prefix"] == f"/s/{SESSION}/jupyter"
    assert seen["origin"] == "http://apps.example.org:8443"
    assert "x-secret-hop" not in seen
    # and back: the app's hop-by-hop headers stop at the proxy, its cookies do not
    assert "x-hop" not in response.headers
    assert "keep-alive" not in response.headers
    assert response.headers["set-cookie"] == "app_cookie=1; Path=/"


async def test_trusted_proxy_chain_is_extended(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory(proxy_trusted_proxies=["127.0.0.0/8"])
    headers = {
        "X-Forwarded-For": "203.0.113.7",
        "X-Forwarded-Host": "apps.example.org",
        "X-Forwarded-Proto": "https",
    }
    async with proxy.client(cookies=proxy.cookie(), headers=headers) as client:
        response = await client.get(f"/s/{SESSION}/echo/")
    seen = seen_by_app(response.content)["headers"]
    assert seen["x-forwarded-for"] == "203.0.113.7, 127.0.0.1"
    assert seen["x-forwarded-proto"] == "https"
    assert seen["host"] == "apps.example.org"


async def test_missing_slash_redirects(proxy: Proxy) -> None:
    async with proxy.client(cookies=proxy.cookie()) as client:
        response = await client.get(f"/s/{SESSION}/jupyter?a=1")
    assert response.status_code == 308
    assert response.headers["location"] == f"/s/{SESSION}/jupyter/?a=1"


@pytest.mark.parametrize(
    ("name", "path", "status", "code"),
    [
        (
            "unknown session",
            "/s/4c1f0f4e-0000-4000-8000-000000000000/echo/",
            404,
            "unknown-session",
        ),
        ("unknown app", f"/s/{SESSION}/tensorboard/", 404, "unknown-app"),
        ("not an app path", "/favicon.ico", 404, "not-found"),
        ("invalid session id", "/s/..%2F..%2Fetc/echo/", 404, "not-found"),
    ],
)
async def test_nothing_there(proxy: Proxy, name: str, path: str, status: int, code: str) -> None:
    headers = {"Accept": "application/json", "Authorization": "Bearer jg_root"}
    async with proxy.client(headers=headers) as client:
        response = await client.get(path)
    assert response.status_code == status, name
    assert problem(response)["type"] == f"urn:jobgate:proxy:{code}", name


async def test_unknown_session_needs_sign_in_first(proxy: Proxy) -> None:
    async with proxy.client() as client:
        response = await client.get("/s/4c1f0f4e-0000-4000-8000-000000000000/echo/")
    assert response.status_code == 401  # nothing is revealed before sign-in


async def test_ended_session_gets_410_page(proxy: Proxy) -> None:
    async with proxy.client(cookies=proxy.cookie()) as client:
        assert (await client.get(f"/s/{SESSION}/echo/")).status_code == 200  # cached now
        await end_route(proxy.redis, SESSION)
        ended = await client.get(f"/s/{SESSION}/echo/")
    assert ended.status_code == 410
    assert "session has ended" in ended.text
    ttl = await proxy.redis.ttl(route_key(SESSION))
    assert 0 < ttl <= 86_400


async def test_removed_route_disappears_from_cache(proxy: Proxy) -> None:
    async with proxy.client(cookies=proxy.cookie()) as client:
        assert (await client.get(f"/s/{SESSION}/echo/")).status_code == 200
        await proxy.redis.delete(route_key(SESSION))
        await proxy.redis.publish(ROUTE_CHANNEL, SESSION)
        await until(
            lambda: _status_is(client, 404),
            timeout=5.0,
            interval=0.025,
            what="the route to disappear",
        )


async def _status_is(client: Any, status: int) -> bool:
    return bool((await client.get(f"/s/{SESSION}/echo/")).status_code == status)


async def test_route_change_is_seen_after_publish(proxy: Proxy) -> None:
    async with running_app() as second_app, proxy.client(cookies=proxy.cookie()) as client:
        assert not await _served_by(client, second_app)  # the first app, and cached now
        # write_route publishes: the very next request must use the new upstream
        await proxy.set_route(upstream=second_app.url)
        await until(
            lambda: _served_by(client, second_app),
            timeout=5.0,
            interval=0.025,
            what="the new upstream to serve",
        )


async def _served_by(client: Any, app: AppServer) -> bool:
    response = await client.get(f"/s/{SESSION}/echo/")
    return bool(seen_by_app(response.content)["port"] == int(app.url.rsplit(":", 1)[1]))


async def test_cache_is_dropped_when_pubsub_reconnects(proxy: Proxy) -> None:
    routes = proxy.app.routes
    assert routes is not None
    async with proxy.client(cookies=proxy.cookie()) as client:
        assert (await client.get(f"/s/{SESSION}/echo/")).status_code == 200  # cached now
        subscriptions = routes.subscriptions
        await proxy.redis.client_kill_filter(_type="pubsub")
        # changed while nobody listened: no publish reaches the proxy for this write
        record = RouteRecord(
            session_id=SESSION,
            owner_id=OWNER,
            apps={"echo": AppRoute(upstream="http://127.0.0.1:9", strip_prefix=True)},
        )
        await proxy.redis.set(route_key(SESSION), record.to_json())

        async def resubscribed() -> bool:
            return routes.subscriptions > subscriptions and routes.live.is_set()

        await until(resubscribed, timeout=10.0, interval=0.025, what="the proxy to subscribe again")
        response = await client.get(f"/s/{SESSION}/echo/")
    assert response.status_code == 502  # the new (dead) upstream, not the cached one


async def test_app_not_answering_is_502_page(proxy: Proxy) -> None:
    record = RouteRecord(
        session_id=SESSION, owner_id=OWNER, apps={"echo": AppRoute(upstream="http://127.0.0.1:9")}
    )
    await write_route(proxy.redis, record)
    async with proxy.client(cookies=proxy.cookie()) as client:
        response = await client.get(f"/s/{SESSION}/echo/")
    assert response.status_code == 502
    assert "starting or has stopped" in response.text


async def test_subdomain_mode(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory(proxy_base_domain="apps.example.org")
    host = f"{SESSION}--echo.apps.example.org"
    token = issue_app_token(SECRET, SESSION, "echo", OWNER)
    async with proxy.client(headers={"Host": host}) as client:
        link = await client.get(f"/?jobgate_token={token}")
        assert link.status_code == 303
        assert link.headers["location"] == "/"
        assert "Path=/;" in link.headers["set-cookie"]  # the app's own host
        cookie = link.headers["set-cookie"].split(";", 1)[0].split("=", 1)[1]
        response = await client.get("/lab?x=1", headers={"Cookie": f"jobgate_auth={cookie}"})
    assert response.status_code == 200
    seen = seen_by_app(response.content)
    assert seen["raw_path"] == "/lab?x=1"  # nothing to strip, nothing added
    assert "x-forwarded-prefix" not in seen["headers"]
    assert seen["headers"]["host"] == host


async def test_activity_is_recorded(proxy: Proxy) -> None:
    async with proxy.client(cookies=proxy.cookie()) as client:
        assert (await client.get(f"/s/{SESSION}/echo/")).status_code == 200

    async def written() -> bool:
        return await proxy.redis.get(activity_key(SESSION)) is not None

    await until(written, timeout=5.0, interval=0.025, what="the activity key")
    value = int(await proxy.redis.get(activity_key(SESSION)))
    assert value > 1_700_000_000


async def test_health_and_metrics(proxy: Proxy) -> None:
    async with proxy.client(cookies=proxy.cookie()) as client:
        await client.get(f"/s/{SESSION}/echo/")
        health = await client.get("/_jobgate/healthz")
        metrics = await client.get("/_jobgate/metrics")
    assert health.status_code == 200
    assert health.json() == {"status": "ok", "redis": True, "route_invalidations": True}
    assert metrics.status_code == 200
    text = metrics.text
    assert f'jobgate_proxy_requests_total{{app="echo",session="{SESSION}"}} 1.0' in text
    assert f'jobgate_proxy_in_flight{{app="echo",session="{SESSION}"}} 0.0' in text
    assert 'jobgate_proxy_upstream_latency_seconds_count{app="echo"} 1.0' in text


async def test_metrics_are_not_public(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory(proxy_metrics_allow=["10.0.0.0/8"])
    async with proxy.client() as client:
        response = await client.get("/_jobgate/metrics")
    assert response.status_code == 403
