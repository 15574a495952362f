"""Who gets in: one-time links, the auth cookie, API keys; owners and admins only."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from proxy_harness import (
    ADMIN,
    OTHER_SESSION,
    OWNER,
    SECRET,
    SESSION,
    STRANGER,
    GatewayStub,
    Proxy,
    ProxyFactory,
    StubKey,
    problem,
)
from waiting import until

from contract.tokens import issue_app_token

pytestmark = pytest.mark.timeout(60)


def seen_by_app(body: bytes) -> dict[str, Any]:
    """The echo app's report, with its headers as a case-insensitive dict."""
    data: dict[str, Any] = json.loads(body)
    data["headers"] = {k.lower(): v for k, v in data["headers"]}
    return data


async def test_no_credentials_is_401_page_not_the_app(proxy: Proxy) -> None:
    async with proxy.client() as client:
        html = await client.get(f"/s/{SESSION}/echo/")
        api = await client.get(f"/s/{SESSION}/echo/", headers={"Accept": "application/json"})
    assert html.status_code == 401
    assert html.headers["content-type"].startswith("text/html")
    assert "needs a sign-in link" in html.text
    assert api.status_code == 401
    assert problem(api)["type"] == "urn:jobgate:proxy:not-signed-in"


async def test_link_becomes_cookie_then_opens_the_app(proxy: Proxy) -> None:
    link = proxy.link("echo") + "&tab=1"
    async with proxy.client() as client:
        first = await client.get(link)
        assert first.status_code == 303
        assert first.headers["location"] == f"/s/{SESSION}/echo/?tab=1"  # token gone
        set_cookie = first.headers["set-cookie"]
        assert set_cookie.startswith("jobgate_auth=")
        for attribute in (f"Path=/s/{SESSION}/", "HttpOnly", "SameSite=Lax", "Max-Age=43200"):
            assert attribute in set_cookie
        assert "Secure" not in set_cookie  # plain http, no https public URL
        client.cookies.set("theme", "dark")  # the app's own cookie rides along
        second = await client.get(first.headers["location"])  # the jar sends ours too
    assert second.status_code == 200
    seen = seen_by_app(second.content)
    assert seen["raw_path"] == "/?tab=1"
    assert seen["headers"]["cookie"] == "theme=dark"  # the app never sees jobgate's cookie


async def test_link_works_only_once(proxy: Proxy) -> None:
    link = proxy.link("echo")
    async with proxy.client() as first, proxy.client() as second:
        assert (await first.get(link)).status_code == 303
        again = await second.get(link)
    assert again.status_code == 401
    assert "already used" in again.text
    assert "jobgate_auth" not in again.headers.get("set-cookie", "")


async def test_expired_link_is_401(proxy: Proxy) -> None:
    token = issue_app_token(SECRET, SESSION, "echo", OWNER, ttl=60, now=1_000_000)
    async with proxy.client() as client:
        response = await client.get(f"/s/{SESSION}/echo/?jobgate_token={token}")
    assert response.status_code == 401
    assert "has expired" in response.text


@pytest.mark.parametrize(
    ("name", "url_app", "token_app", "secret"),
    [
        ("token for another app", "jupyter", "echo", SECRET),
        ("token signed with another secret", "echo", "echo", "another-secret-0123456789"),
    ],
)
async def test_bad_link_is_401(
    proxy: Proxy, name: str, url_app: str, token_app: str, secret: str
) -> None:
    token = issue_app_token(secret, SESSION, token_app, OWNER)
    async with proxy.client() as client:
        response = await client.get(f"/s/{SESSION}/{url_app}/?jobgate_token={token}")
    assert response.status_code == 401, name


async def test_stranger_with_a_valid_link_for_someone_elses_session_is_403(proxy: Proxy) -> None:
    # A gateway bug (or a forged token) naming a user who is neither owner nor admin.
    async with proxy.client() as client:
        response = await client.get(proxy.link("echo", user=STRANGER))
    assert response.status_code == 403
    assert "set-cookie" not in response.headers


@pytest.mark.parametrize(
    ("name", "cookie_user", "cookie_session", "admin", "status"),
    [
        ("owner", OWNER, SESSION, False, 200),
        ("another user's cookie", STRANGER, SESSION, False, 403),
        ("cookie of another session", OWNER, OTHER_SESSION, False, 403),
        ("admin", ADMIN, SESSION, True, 200),
    ],
)
async def test_cookie_access(
    proxy: Proxy, name: str, cookie_user: str, cookie_session: str, admin: bool, status: int
) -> None:
    cookie = proxy.cookie(user=cookie_user, session=cookie_session, admin=admin)
    async with proxy.client(cookies=cookie) as client:
        response = await client.get(f"/s/{SESSION}/echo/x")
    assert response.status_code == status, name


async def test_expired_cookie_is_401(proxy: Proxy) -> None:
    cookie = proxy.cookie(lifetime=-10)
    async with proxy.client(cookies=cookie) as client:
        response = await client.get(f"/s/{SESSION}/echo/")
    assert response.status_code == 401
    assert "sign-in to this session has expired" in response.text


@pytest.mark.parametrize(
    ("name", "key", "status"),
    [
        ("owner's key", "jg_alice", 200),
        ("owner's key with only the sessions scope", "jg_alice_sessions", 200),
        ("owner's read-only key", "jg_alice_read", 403),
        ("owner's endpoints key", "jg_alice_endpoints", 403),
        ("another user's key", "jg_mallory", 403),
        ("admin's key", "jg_root", 200),
        ("unknown key", "jg_nobody", 401),
    ],
)
async def test_bearer_key_access(proxy: Proxy, name: str, key: str, status: int) -> None:
    async with proxy.client(headers={"Authorization": f"Bearer {key}"}) as client:
        response = await client.get(f"/s/{SESSION}/echo/")
    assert response.status_code == status, name
    if status == 200:
        assert "authorization" not in seen_by_app(response.content)["headers"]  # key kept back
    else:  # an API client gets problem+json without asking
        assert problem(response)["status"] == status


async def test_a_key_without_the_sessions_scope_opens_no_app_and_an_expired_one_none(
    proxy_factory: ProxyFactory, gateway_stub: GatewayStub
) -> None:
    proxy = await proxy_factory(proxy_user_cache_ttl=60)  # longer than the test: expiry rules
    read_only = {"Authorization": "Bearer jg_alice_read"}
    async with proxy.client(headers=read_only) as client:
        api = await client.get(f"/s/{SESSION}/echo/")
        page = await client.get(f"/s/{SESSION}/jupyter/", headers={"Accept": "text/html"})
        ghost = await client.get(f"/s/{OTHER_SESSION}/echo/")
    assert problem(api)["type"] == "urn:jobgate:proxy:key-lacks-scope"
    assert "'sessions' scope" in problem(api)["detail"]
    assert page.status_code == 403
    assert page.headers["content-type"].startswith("text/html")
    assert "&#x27;sessions&#x27; scope" in page.text
    assert ghost.status_code == 403  # refused before anything is said about the session
    assert problem(ghost) == problem(api)

    # a key that expires: it works until then, cached, and not a moment longer
    gateway_stub.keys["jg_alice_soon"] = StubKey(OWNER, expires_at=time.time() + 2)
    async with proxy.client(headers={"Authorization": "Bearer jg_alice_soon"}) as client:
        assert (await client.get(f"/s/{SESSION}/echo/")).status_code == 200
        assert (await client.get(f"/s/{SESSION}/echo/")).status_code == 200
        asked = len(gateway_stub.calls)

        async def refused() -> bool:
            return (await client.get(f"/s/{SESSION}/echo/")).status_code == 401

        await until(refused, timeout=15, interval=0.1, what="the expired key refused")
    assert len(gateway_stub.calls) == asked + 1  # asked again once, at its expiry


async def test_bearer_answers_are_cached(proxy: Proxy, gateway_stub: GatewayStub) -> None:
    async with proxy.client(headers={"Authorization": "Bearer jg_alice"}) as client:
        answers = await asyncio.gather(*(client.get(f"/s/{SESSION}/echo/") for _ in range(5)))
        answers.append(await client.get(f"/s/{SESSION}/echo/"))
    assert [a.status_code for a in answers] == [200] * 6
    assert len(gateway_stub.calls) == 1


async def test_gateway_down_is_503_not_401(proxy_factory: ProxyFactory) -> None:
    proxy = await proxy_factory(gateway_url="http://127.0.0.1:9")  # discard port: refused
    async with proxy.client(headers={"Authorization": "Bearer jg_alice"}) as client:
        response = await client.get(f"/s/{SESSION}/echo/")
    assert response.status_code == 503
    assert problem(response)["type"] == "urn:jobgate:proxy:gateway-unavailable"


async def test_non_jobgate_authorization_goes_to_the_app(proxy: Proxy) -> None:
    headers = {"Authorization": "token jupyter-own-token"}
    async with proxy.client(cookies=proxy.cookie(), headers=headers) as client:
        response = await client.get(f"/s/{SESSION}/echo/")
    assert response.status_code == 200
    assert seen_by_app(response.content)["headers"]["authorization"] == "token jupyter-own-token"


@pytest.mark.parametrize(
    ("name", "trusted", "forwarded_proto", "public_url", "secure"),
    [
        ("https via a trusted TLS terminator", ["127.0.0.1"], "https", None, True),
        ("X-Forwarded-Proto from an untrusted peer", [], "https", None, False),
        ("https public URL", [], None, "https://apps.example.org", True),
    ],
)
async def test_cookie_is_secure_behind_https(
    proxy_factory: ProxyFactory,
    name: str,
    trusted: list[str],
    forwarded_proto: str | None,
    public_url: str | None,
    secure: bool,
) -> None:
    proxy = await proxy_factory(proxy_trusted_proxies=trusted, proxy_public_url=public_url)
    headers = {"X-Forwarded-Proto": forwarded_proto} if forwarded_proto else {}
    async with proxy.client(headers=headers) as client:
        response = await client.get(
            proxy.link("echo").replace("https://apps.example.org", proxy.url)
        )
    assert response.status_code == 303, name
    assert ("; Secure" in response.headers["set-cookie"]) is secure, name
