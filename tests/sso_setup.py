"""The single sign-on tests' set-up: a real OpenID Connect provider (tests/idp.py) and a
gateway that trusts it as "corp" (display name "Corp SSO"), with the console's client,
the CLI's client (the device flow, and loopback redirects on any port) and binding rules:
ml-team → project ml, cv-team → project vision, platform-admins → the admin role.

A test module imports the fixtures it uses, which then go by ``idp`` and ``sso_stack``:
``from sso_setup import idp_fixture, sso_stack_fixture``.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from harness import Stack, started_stack
from idp import TestIdP
from pydantic import SecretStr

__all__ = ["CLI", "CONSOLE", "CONSOLE_SECRET", "KEY", "idp_fixture", "sso_stack_fixture"]

KEY = base64.b64encode(b"k" * 32).decode()
CONSOLE, CLI = "jobgate-console", "jobgate-cli"
CONSOLE_SECRET = "console-secret-5f1c"


@pytest.fixture(name="idp")
def idp_fixture() -> Iterator[TestIdP]:
    with TestIdP() as provider:
        yield provider


@pytest.fixture(name="sso_stack")
async def sso_stack_fixture(
    pg_url: str, redis_url: str, tmp_path: Path, idp: TestIdP
) -> AsyncIterator[Stack]:
    async with started_stack(pg_url, redis_url, tmp_path, secrets_key=SecretStr(KEY)) as s:
        callback = f"{s.url}/sign-in/oidc/corp/callback"
        idp.add_client(CONSOLE, secret=CONSOLE_SECRET, redirect_uris=[callback])
        idp.add_client(CLI, device=True, loopback=True)
        async with s.client() as api:
            r = await api.put(
                "/v1/auth/providers/corp",
                json={
                    "issuer": idp.issuer,
                    "client_id": CONSOLE,
                    "client_secret": CONSOLE_SECRET,
                    "cli_client_id": CLI,
                    "display_name": "Corp SSO",
                    "scopes": "openid profile email groups",
                },
            )
            assert r.status_code == 201, r.text
            assert r.json()["has_client_secret"] is True
            assert CONSOLE_SECRET not in r.text
            for project in ("ml", "vision"):
                assert (await api.post("/v1/projects", json={"name": project})).status_code == 201
            rules = {
                "ml": {"value": "ml-team", "project": "ml"},
                "vision": {"value": "cv-team", "project": "vision"},
                "admins": {"value": "platform-admins", "role": "admin"},
            }
            for name, rule in rules.items():
                r = await api.put(f"/v1/auth/providers/corp/bindings/{name}", json=rule)
                assert r.status_code == 201, r.text
        yield s
