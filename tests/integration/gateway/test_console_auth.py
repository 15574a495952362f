"""The console's sign-in cookie against the real gateway, PostgreSQL and Redis.

The cookie maps to the same principal as its key; cookie-authenticated writes need the
page's CSRF token and a same-origin Origin; the Bearer path is unchanged; signing out
ends the cookie everywhere. (The browser side is tests/e2e/test_console.py.)
"""

from __future__ import annotations

import re

import httpx
from harness import Stack

COOKIE = "jobgate_console"


async def sign_in(browser: httpx.AsyncClient, key: str) -> str:
    """Sign *browser* (it keeps cookies) in with *key*; the CSRF token of its pages."""
    r = await browser.post("/sign-in", data={"key": key})
    assert r.status_code == 303
    assert r.headers["location"] == "/"
    set_cookie = r.headers["set-cookie"]
    assert "HttpOnly" in set_cookie
    assert "SameSite=strict" in set_cookie
    assert key not in set_cookie
    page = await browser.get("/")
    assert page.status_code == 200
    token = re.search(r'name="csrf-token" content="([^"]+)"', page.text)
    assert token is not None
    return token.group(1)


async def test_the_cookie_is_the_key_s_principal_with_csrf_on_writes(stack: Stack) -> None:
    alice_key = await stack.create_user("alice")
    async with httpx.AsyncClient(base_url=stack.url) as anon:
        assert (await anon.get("/")).headers["location"] == "/sign-in"
        refused = await anon.post("/sign-in", data={"key": "jg_" + "x" * 43})
        assert refused.status_code == 401
        assert "unknown" in refused.text
        assert COOKIE not in refused.cookies
        foreign = await anon.post(
            "/sign-in", data={"key": alice_key}, headers={"Origin": "http://evil.example"}
        )
        assert foreign.status_code == 403

    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as browser:
        token = await sign_in(browser, alice_key)
        me = (await browser.get("/v1/users/me")).json()
        assert me["name"] == "alice"
        assert (await browser.get("/v1/users")).status_code == 403  # not an admin, as her key

        body = {"command": ["true"]}
        no_token = await browser.post("/v1/sessions", json=body)
        assert no_token.status_code == 403
        assert "CSRF" in no_token.json()["detail"]
        wrong = await browser.post("/v1/sessions", json=body, headers={"X-CSRF-Token": "x"})
        assert wrong.status_code == 403
        cross = await browser.post(
            "/v1/sessions",
            json=body,
            headers={"X-CSRF-Token": token, "Origin": "http://evil.example"},
        )
        assert cross.status_code == 403
        made = await browser.post(
            "/v1/sessions", json=body, headers={"X-CSRF-Token": token, "Origin": stack.url}
        )
        assert made.status_code == 201
        assert made.json()["owner"] == "alice"

        # someone else's session: a 404 page, as the API's 404
        admins = await stack.submit(command=["true"])
        page = await browser.get(f"/sessions/{admins['id']}")
        assert page.status_code == 404
        assert "No such session" in page.text
        assert (await browser.get(f"/sessions/{made.json()['id']}")).status_code == 200
        assert (await browser.get("/admin")).status_code == 404

        # the Bearer path needs no token and ignores a cookie
        async with stack.client(alice_key) as api:
            assert (await api.post("/v1/sessions", json=body)).status_code == 201

        # signing out needs the token, then ends the cookie's access
        assert (await browser.post("/sign-out", data={"csrf": "x"})).status_code == 403
        cookie = browser.cookies[COOKIE]
        out = await browser.post("/sign-out", data={"csrf": token})
        assert out.status_code == 303
        async with httpx.AsyncClient(base_url=stack.url, cookies={COOKIE: cookie}) as replay:
            assert (await replay.get("/v1/sessions")).status_code == 401
            assert (await replay.get("/")).headers["location"] == "/sign-in"
