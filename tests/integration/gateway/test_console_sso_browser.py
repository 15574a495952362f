"""The console's "Sign in with …" in a real browser: Debian's Chromium driven by
Playwright (its async API: the gateway runs in this test's event loop) through the real
test identity provider (tests/idp.py) and the real gateway.

One errand: the sign-in page offers the provider beside the key form; a wrong password
at the provider shows its error and signs nobody in; the right one comes back through
the "Signed in" page to the sessions page as dana; the browser then holds the HttpOnly
sign-in cookie and nowhere an ID token, the code or a key; signing out ends it. No
script error on any page. (The flow's protocol checks, without a browser: test_sso.py.)
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from harness import Stack
from idp import TestIdP
from playwright.async_api import async_playwright, expect
from sso_setup import idp_fixture, sso_stack_fixture  # noqa: F401

CHROMIUM = os.environ.get("JOBGATE_CHROMIUM", "/usr/bin/chromium")
WAIT_MS = 30_000
JWT = re.compile(r"eyJ[\w-]+\.[\w-]+\.[\w-]*")


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the screenshot goes; first, that there is a browser to take it."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: run ./scripts/test.sh, which installs it")
    artefacts = os.environ.get("JOBGATE_TEST_ARTIFACTS")
    folder = Path(artefacts) / "console" if artefacts else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def test_sign_in_with_corp_sso_in_chromium(
    shots: Path, sso_stack: Stack, idp: TestIdP
) -> None:
    stack = sso_stack
    idp.set_user("dana", groups=["ml-team"])
    at_idp = re.compile("^" + re.escape(f"{idp.issuer}/authorize"))
    errors: list[str] = []
    visited: list[str] = []
    async with async_playwright() as pw:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium's sandbox refuses root
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 860})
            context.set_default_timeout(WAIT_MS)
            page = await context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on(
                "framenavigated", lambda f: visited.append(f.url) if f == page.main_frame else None
            )

            # 1. the provider's button beside the key form
            await page.goto(f"{stack.url}/sign-in")
            sso = page.get_by_role("link", name="Sign in with Corp SSO")
            await expect(sso).to_be_visible()
            await expect(page.get_by_label("API key")).to_be_visible()
            await page.screenshot(path=str(shots / "sso-sign-in.png"), full_page=True)

            # 2. at the provider, a wrong password first: its error, nobody signed in
            await sso.click()
            await expect(page).to_have_url(at_idp)
            await page.locator('input[name="username"]').fill("dana")
            await page.locator('input[name="password"]').fill("not-her-password")
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.locator("p.error")).to_contain_text("Wrong username or password")
            await expect(page).to_have_url(at_idp)
            assert "jobgate_console" not in {c["name"] for c in await context.cookies()}

            # 3. the right one: back through "Signed in" to the sessions page, as dana
            await page.locator('input[name="username"]').fill("dana")
            await page.locator('input[name="password"]').fill("pw")
            await page.get_by_role("button", name="Sign in").click()
            await expect(page).to_have_url(f"{stack.url}/")
            await expect(page.locator("body")).to_have_attribute("data-page", "sessions")
            await expect(page.locator("header .who")).to_have_text("dana (user)")
            await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
            callbacks = [u for u in visited if "/sign-in/oidc/corp/callback?" in u]
            assert len(callbacks) == 1, visited
            code = parse_qs(urlsplit(callbacks[0]).query)["code"][0]

            # 4. the browser holds the HttpOnly sign-in cookie, never a token, code or key
            cookies = await context.cookies()
            signed = [c for c in cookies if c["name"] == "jobgate_console"]
            assert len(signed) == 1, cookies
            assert signed[0]["httpOnly"] is True
            assert signed[0]["sameSite"] == "Strict"
            assert "jobgate_sso" not in {c["name"] for c in cookies}  # the flow's is gone
            stored = [c["value"] for c in cookies]
            for origin_url in (stack.url, idp.issuer):
                await page.goto(f"{origin_url}/favicon.ico")  # each origin's storage
                stored += await page.evaluate(
                    "() => [localStorage, sessionStorage].flatMap(s => Object.values(s))"
                )
            await page.goto(f"{stack.url}/")
            await expect(page.locator("header .who")).to_have_text("dana (user)")
            for value in stored:
                assert code not in value
                assert "jg_" not in value
                assert not JWT.search(value), value
            assert "jg_" not in await page.content()

            # 5. signing out ends it: back at the sign-in page, and / sends there again
            await page.get_by_role("button", name="Sign out").click()
            await expect(page).to_have_url(f"{stack.url}/sign-in")
            await expect(sso).to_be_visible()
            assert "jobgate_console" not in {c["name"] for c in await context.cookies()}
            await page.goto(f"{stack.url}/")
            await expect(page).to_have_url(f"{stack.url}/sign-in")
            await context.close()
        finally:
            await browser.close()
    assert errors == [], "the console's script failed"
