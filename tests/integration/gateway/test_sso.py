"""Single sign-on against a real OpenID Connect provider (tests/idp.py, on Authlib's
server), the real gateway, PostgreSQL and Redis.

- every forged or broken ID token is a 401 naming the check that failed, never echoing
  the token, and each attempt leaves an audit row;
- ``jobgate login`` (the device flow) as a process: the binding rules give projects and
  the admin role, a groups change and a key rotation at the provider take effect at the
  next renewal, ``jobgate logout`` revokes the key, a user disabled at the provider is
  signed out at the next renewal;
- ``jobgate login --browser`` (the loopback redirect, RFC 8252), and plain ``login`` where
  the provider has no device flow: PKCE, state and nonce, one callback then the port
  closes, a forged state fails the sign-in and saves nothing;
- the console's code flow with PKCE, state bound to the browser, single use.

(The console in Chromium: test_console_sso_browser.py; the set-up: tests/sso_setup.py.)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import sys
import time
import tomllib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from harness import Stack
from idp import TestIdP
from joserfc.jwk import RSAKey
from sso_setup import CLI, CONSOLE, CONSOLE_SECRET, idp_fixture, sso_stack_fixture  # noqa: F401


def claims(idp: TestIdP, sub: str = "alice", **over: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {
        "iss": idp.issuer,
        "aud": CLI,
        "sub": sub,
        "iat": now,
        "exp": now + 300,
        "preferred_username": sub,
        "groups": [],
        "jti": uuid.uuid4().hex,  # two tokens made in one second still differ
    }
    return base | over


async def exchange(stack: Stack, token: str, provider: str = "corp") -> httpx.Response:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as anon:
        return await anon.post("/v1/auth/token", json={"provider": provider, "id_token": token})


async def test_forged_and_broken_tokens_are_refused_naming_the_check(
    sso_stack: Stack, idp: TestIdP
) -> None:
    stack = sso_stack
    other = RSAKey.generate_key(2048, parameters={"kid": "attacker"})
    public = json.dumps(idp.public_jwk())
    now = int(time.time())
    forged = {
        "algorithm": idp.sign(claims(idp), alg="none"),
        # the classic confusion: HMAC keyed with the provider's public key
        "algorithm ": idp.sign(claims(idp), alg="HS256", key=public),
        "issuer": idp.sign(claims(idp, iss="https://evil.example")),
        "audience": idp.sign(claims(idp, aud="someone-else")),
        "audience ": idp.sign(claims(idp, aud=[CLI, "other"], azp="other")),
        "expiry": idp.sign(claims(idp, iat=now - 900, exp=now - 600)),
        "not-before": idp.sign(claims(idp, iat=now + 600, exp=now + 900)),
        "signature": idp.sign(claims(idp), key=other),  # the provider's kid, another key
        "key": idp.sign(claims(idp), kid="attacker", key=other),
        "subject": idp.sign({k: v for k, v in claims(idp).items() if k != "sub"}),
        "format": "not-a-jwt-at-all.x.y",
    }
    for check, token in forged.items():
        r = await exchange(stack, token)
        assert r.status_code == 401, (check, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        body = r.json()
        assert body["check"] == check.strip(), (check, body)
        assert not [part for part in token.split(".") if len(part) > 8 and part in r.text]
    unknown = await exchange(stack, idp.sign(claims(idp)), provider="nobody")
    assert (unknown.status_code, unknown.json()["check"]) == (401, "provider")

    # a well-formed token of the provider works, and makes the user (never a local one)
    await stack.create_user("bob")
    token = idp.sign(claims(idp, sub="b-42", preferred_username="Bob"))
    ok = await exchange(stack, token)
    assert ok.status_code == 200, ok.text
    made = ok.json()
    assert (made["user"], made["role"], made["created"]) == ("bob-2", "user", True)
    assert made["key_name"].startswith("oidc-corp-")
    async with stack.client(made["key"]) as bob2:
        assert (await bob2.get("/v1/users/me")).json()["name"] == "bob-2"
    replayed = await exchange(stack, token)  # the same token once more: refused
    assert replayed.status_code == 401
    assert replayed.json()["check"] == "replay"
    again = await exchange(stack, idp.sign(claims(idp, sub="b-42", preferred_username="Bob")))
    assert (again.json()["user"], again.json()["created"]) == ("bob-2", False)

    # a subject is unique per issuer only: changing the issuer forgets the links
    async with stack.client() as api:
        for issuer in ("https://idp.other.example", idp.issuer):
            body = {"issuer": issuer, "client_id": CONSOLE, "cli_client_id": CLI}
            r = await api.put("/v1/auth/providers/corp", json=body)
            assert r.status_code == 200, r.text
    fresh = await exchange(stack, idp.sign(claims(idp, sub="b-42", preferred_username="Bob")))
    assert (fresh.json()["user"], fresh.json()["created"]) == ("bob-3", True)

    async with stack.client() as api:
        rows = (await api.get("/v1/audit", params={"action": "auth-token"})).json()["items"]
    refused = [r for r in rows if r["status"] == 401]
    assert len(refused) == len(forged) + 2  # and the unknown provider, and the replay
    signed_in = [r for r in rows if r["status"] == 200]
    assert {r["user"] for r in signed_in} == {"bob-2", "bob-3"}
    assert all("oidc corp" in r["credential"] for r in signed_in)
    assert not any(made["key"] in json.dumps(r) for r in rows)


@dataclass
class Cli:
    stack: Stack
    config: Path

    async def run(
        self,
        *args: str,
        approve: tuple[TestIdP, str] | None = None,
        browse: Callable[[str], Awaitable[object]] | None = None,
    ) -> tuple[int, str]:
        """``jobgate ARGS`` with this profile (no key in the environment); when *approve*
        is given, the device code it prints is approved at the provider as that user;
        *browse* is given the sign-in URL ``login --browser`` prints, and does what the
        user's browser would. ``BROWSER=true``: the browser it "opens" is a no-op."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "jobgate",
            *args,
            env=env
            | {"JOBGATE_URL": self.stack.url, "JOBGATE_CONFIG": str(self.config)}
            | {"BROWSER": "true"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stderr is not None
        assert proc.stdout is not None
        said: list[str] = []
        try:
            async with asyncio.timeout(60):
                if approve is not None:
                    while not (code := re.search(r"enter the code\s+(\S+)", "".join(said))):
                        line = await proc.stderr.readline()
                        assert line, "".join(said)
                        said.append(line.decode())
                    idp, sub = approve
                    await asyncio.to_thread(idp.approve_device, code.group(1), sub)
                if browse is not None:
                    while not (url := re.search(r"visit:\s+(\S+)\n", "".join(said))):
                        line = await proc.stderr.readline()
                        assert line, "".join(said)
                        said.append(line.decode())
                    await browse(url.group(1))
                out, rest = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise AssertionError(f"jobgate {' '.join(args)}: still running") from None
        assert proc.returncode is not None
        return proc.returncode, out.decode() + "".join(said) + rest.decode()

    def profile(self) -> dict[str, Any]:
        with self.config.open("rb") as fh:
            return tomllib.load(fh)

    def expire_key(self) -> None:
        """As if the key's 15 minutes had passed: the next command renews it."""
        text = self.config.read_text()
        self.config.write_text(
            re.sub(r'key_expires_at = "[^"]+"', 'key_expires_at = "2000-01-01T00:00:00Z"', text)
        )


async def test_cli_login_bindings_groups_rotation_logout_and_disable(
    sso_stack: Stack, idp: TestIdP, tmp_path: Path
) -> None:
    stack = sso_stack
    idp.set_user("alice", email="alice@example.org", groups=["ml-team"])
    cli = Cli(stack, tmp_path / "alice.toml")

    rc, said = await cli.run("login", approve=(idp, "alice"))
    assert rc == 0, said
    assert "signed in as alice (user; projects: ml)" in said
    assert stat.S_IMODE(cli.config.stat().st_mode) == 0o600
    profile = cli.profile()
    assert profile["sso"]["provider"] == "corp"
    assert profile["sso"]["refresh_token"]
    first_key = profile["api_key"]
    async with stack.client(first_key) as api:
        me = (await api.get("/v1/users/me")).json()
        assert (me["name"], me["role"]) == ("alice", "user")
        assert (await api.get("/v1/users")).status_code == 403
    rc, said = await cli.run("sessions", "ls")
    assert rc == 0, said

    # a groups change at the provider: the next renewal makes her an admin of vision
    idp.set_user("alice", email="alice@example.org", groups=["cv-team", "platform-admins"])
    cli.expire_key()
    rc, said = await cli.run("admin", "users", "ls")
    assert rc == 0, said
    assert "alice" in said
    renewed = cli.profile()
    assert renewed["api_key"] != first_key
    assert renewed["sso"]["refresh_token"] != profile["sso"]["refresh_token"]  # rotated
    async with stack.client() as api:
        projects = {p["name"]: p["members"] for p in (await api.get("/v1/projects")).json()}
    assert "alice" in projects["vision"]
    assert "alice" not in projects["ml"]

    # an admin adds her to vision by hand: leaving cv-team no longer takes it away
    async with stack.client() as api:
        r = await api.post("/v1/projects/vision/members", json={"user": "alice"})
        assert r.status_code == 200, r.text
    idp.set_user("alice", email="alice@example.org", groups=["platform-admins"])

    # the provider rotates its signing key: the gateway fetches the new JWKS by itself
    idp.rotate_keys()
    cli.expire_key()
    rc, said = await cli.run("sessions", "ls")
    assert rc == 0, said
    async with stack.client() as api:
        projects = {p["name"]: p["members"] for p in (await api.get("/v1/projects")).json()}
    assert "alice" in projects["vision"]

    # logout revokes the key it made, and the refresh token at the provider (RFC 7009)
    # (its key about to expire: logout revokes it rather than renewing it first)
    key, refresh = cli.profile()["api_key"], cli.profile()["sso"]["refresh_token"]
    cli.expire_key()
    rc, said = await cli.run("logout")
    assert rc == 0, said
    async with stack.client() as api:
        assert (await api.get("/v1/keys", params={"user": "alice"})).json() == []
    assert "signed out of corp" in said
    assert "refresh token revoked at the provider" in said
    async with httpx.AsyncClient(timeout=30) as anyone:
        stale = await anyone.post(
            f"{idp.issuer}/token",
            data={"grant_type": "refresh_token", "refresh_token": refresh, "client_id": CLI},
        )
    assert stale.status_code == 400
    assert stale.json()["error"] == "invalid_grant"
    assert "sso" not in cli.profile()
    assert not cli.profile()["api_key"]
    async with stack.client(key) as api:
        assert (await api.get("/v1/users/me")).status_code == 401

    # signed in again, then disabled at the provider: the next renewal signs her out
    rc, said = await cli.run("login", approve=(idp, "alice"))
    assert rc == 0, said
    idp.disable("alice")
    cli.expire_key()
    rc, said = await cli.run("sessions", "ls")
    assert rc == 1
    assert "refused to renew" in said
    assert "jobgate login" in said
    assert "sso" not in cli.profile()
    rc, said = await cli.run("sessions", "ls")
    assert rc == 1  # no key any more, rather than the stale one


async def test_cli_login_browser_loopback_redirect_state_and_fallback(
    sso_stack: Stack, idp: TestIdP, tmp_path: Path
) -> None:
    stack = sso_stack
    idp.set_user("erin", groups=["ml-team"])
    cli = Cli(stack, tmp_path / "erin.toml")
    seen: dict[str, str] = {}

    async def browser(url: str) -> None:
        """What erin's browser does: the IdP's sign-in, then back to the CLI's port."""
        to = urlsplit(url)
        asked = {k: v[0] for k, v in parse_qs(to.query).items()}
        assert f"{to.scheme}://{to.netloc}{to.path}" == f"{idp.issuer}/authorize"
        assert (asked["client_id"], asked["response_type"]) == (CLI, "code")
        assert asked["code_challenge_method"] == "S256"
        assert len(asked["code_challenge"]) == 43  # a SHA-256, base64url
        assert asked["state"]
        assert asked["nonce"]
        assert {"openid", "offline_access"} <= set(asked["scope"].split())
        back_to = urlsplit(asked["redirect_uri"])  # RFC 8252 §7.3: any port
        assert (back_to.scheme, back_to.hostname) == ("http", "127.0.0.1")
        assert back_to.path == "/callback"
        async with httpx.AsyncClient(timeout=10) as http:
            stray = await http.get(f"http://127.0.0.1:{back_to.port}/favicon.ico")
            assert stray.status_code == 404  # and the sign-in still waits
            back = await asyncio.to_thread(idp.sign_in, url, "erin")
            assert back.startswith(asked["redirect_uri"] + "?")
            code = parse_qs(urlsplit(back).query)["code"][0]
            page = await http.get(back)
        assert page.status_code == 200, page.text
        assert "Signed in to jobgate; you can close this tab." in page.text
        assert code not in page.text
        assert page.headers["referrer-policy"] == "no-referrer"
        seen["back"] = back

    rc, said = await cli.run("login", "--browser", browse=browser)
    assert rc == 0, said
    assert "Opening the sign-in page in your browser; if nothing opens, visit:" in said
    assert "signed in as erin (user; projects: ml) through corp" in said
    assert stat.S_IMODE(cli.config.stat().st_mode) == 0o600
    profile = cli.profile()
    assert (profile["sso"]["provider"], profile["sso"]["client_id"]) == ("corp", CLI)
    assert profile["sso"]["token_endpoint"] == f"{idp.issuer}/token"
    assert profile["sso"]["refresh_token"]
    async with stack.client(profile["api_key"]) as api:
        me = (await api.get("/v1/users/me")).json()
        assert (me["name"], me["role"]) == ("erin", "user")
    async with httpx.AsyncClient(timeout=10) as http:  # the one-shot server is gone
        try:
            await http.get(seen["back"])
            raise AssertionError("the loopback server still answers")
        except httpx.ConnectError:
            pass
    # its key renews like the device flow's, with the refresh token it kept
    cli.expire_key()
    rc, said = await cli.run("sessions", "ls")
    assert rc == 0, said
    assert cli.profile()["sso"]["refresh_token"] != profile["sso"]["refresh_token"]

    # a callback with another state (a page on this machine forging one): refused, and
    # the CLI fails saying so, saving nothing
    async def forged(url: str) -> None:
        redirect_uri = parse_qs(urlsplit(url).query)["redirect_uri"][0]
        async with httpx.AsyncClient(timeout=10) as http:
            page = await http.get(redirect_uri, params={"code": "stolen", "state": "not-this"})
        assert page.status_code == 400
        assert "not started here" in page.text

    mallory = Cli(stack, tmp_path / "mallory.toml")
    rc, said = await mallory.run("login", "--browser", browse=forged)
    assert rc == 1, said
    assert "another sign-in's state (not started here)" in said
    assert "nothing was saved" in said
    assert not mallory.config.exists()

    # a provider without the device flow: plain `jobgate login` takes the browser's way
    idp.offer_device_flow = False
    again = Cli(stack, tmp_path / "erin-again.toml")
    rc, said = await again.run("login", browse=browser)
    assert rc == 0, said
    assert "enter the code" not in said
    assert "signed in as erin" in said
    assert again.profile()["sso"]["refresh_token"]


async def test_console_code_flow_with_pkce_state_and_browser_binding(
    sso_stack: Stack, idp: TestIdP
) -> None:
    stack = sso_stack
    idp.set_user("carol", groups=["ml-team"])
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as browser:
        page = await browser.get("/sign-in")
        assert 'href="/sign-in/oidc/corp"' in page.text
        assert "Sign in with Corp SSO" in page.text

        start = await browser.get("/sign-in/oidc/corp")
        assert start.status_code == 303
        to = urlsplit(start.headers["location"])
        asked = {k: v[0] for k, v in parse_qs(to.query).items()}
        assert f"{to.scheme}://{to.netloc}" == idp.issuer
        assert asked["client_id"] == CONSOLE
        assert asked["code_challenge_method"] == "S256"
        assert asked["state"]
        assert asked["nonce"]
        assert asked["code_challenge"]
        back = await asyncio.to_thread(idp.sign_in, start.headers["location"], "carol")

        # another browser cannot finish it (a login CSRF), with or without a flow cookie
        # of its own, and its attempt leaves the sign-in to the browser that started it
        async with httpx.AsyncClient(timeout=30) as stranger:
            foreign = await stranger.get(back)
            assert foreign.status_code == 401
            assert "expired or was not started here" in foreign.text
            await stranger.get(f"{stack.url}/sign-in/oidc/corp")  # its own flow cookie
            foreign = await stranger.get(back)
            assert foreign.status_code == 401
            assert "jobgate_console" not in stranger.cookies

        await browser.get("/sign-in/oidc/corp")  # a second tab starts one too
        done = await browser.get(back)  # the first still finishes
        assert done.status_code == 200, done.text
        assert "Signed in as carol" in done.text
        assert "SameSite=strict" in done.headers["set-cookie"]
        me = (await browser.get("/v1/users/me")).json()
        assert me["name"] == "carol"
        assert (await browser.get("/")).status_code == 200
        replay = await browser.get(back)
        assert replay.status_code == 401  # single use

        # signing out ends the cookie and revokes the key the sign-in made
        async with stack.client() as api:
            keys = (await api.get("/v1/keys", params={"user": "carol"})).json()
        assert [k["name"][:10] for k in keys] == ["oidc-corp-"]
        page = await browser.get("/")
        csrf = re.search(r'name="csrf-token" content="([^"]+)"', page.text)
        assert csrf is not None
        out = await browser.post("/sign-out", data={"csrf": csrf.group(1)})
        assert out.status_code == 303
        async with stack.client() as api:
            assert (await api.get("/v1/keys", params={"user": "carol"})).json() == []

        wrong = await browser.get("/sign-in/oidc/corp/callback?error=access_denied")
        assert wrong.status_code == 401
        assert "access_denied" in wrong.text
        missing = await browser.get("/sign-in/oidc/nobody")
        assert missing.status_code == 401
        assert "no identity provider" in missing.text

    async with stack.client() as api:
        rows = (await api.get("/v1/audit", params={"action": "console-sso-callback"})).json()
        assert "carol" in {r["user"] for r in rows["items"] if r["status"] == 200}
        projects = {p["name"]: p["members"] for p in (await api.get("/v1/projects")).json()}
        assert "carol" in projects["ml"]
        # the client secret is never shown, but kept
        prov = (await api.get("/v1/auth/providers/corp")).json()
        assert prov["has_client_secret"] is True
        assert CONSOLE_SECRET not in json.dumps(prov)
