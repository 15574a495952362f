"""`jobgate admin config export|import` between two real gateways (PostgreSQL -> SQLite)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from harness import Stack, started_stack
from pydantic import SecretStr

from gateway.db.migrate import upgrade_async

#: an identity provider's client secret (sealed with the first deployment's secrets key)
CLIENT_SECRET = "idp-Cl1entS3cret-7f6e5d4c3b2a"


@pytest.fixture
async def kstack(pg_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """A deployment with a secrets key (a provider's client secret is sealed with it)."""
    key = SecretStr(base64.b64encode(os.urandom(32)).decode())
    async with started_stack(pg_url, redis_url, tmp_path, secrets_key=key) as s:
        yield s


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


async def cli(stack: Stack, *args: str) -> Done:
    """The CLI as a process (the gateway runs in this test's event loop: never block it)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env = clean | {"JOBGATE_URL": stack.url, "JOBGATE_API_KEY": stack.admin_key}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jobgate",
        "admin",
        "config",
        *args,
        env=env | {"JOBGATE_CONFIG": "/nonexistent/jobgate.toml"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return Done(proc.returncode, out.decode(), err.decode())


async def configure(stack: Stack) -> None:
    """What an operator sets up by hand: a group, an image, users, a project, policies,
    a budget, identity providers and their binding rules."""
    await stack.create_user("alice")
    await stack.create_user("bob", role="admin")
    async with stack.client() as api:
        calls: list[tuple[str, str, dict[str, Any]]] = [
            (
                "PUT",
                "/v1/resource-groups/gpu",
                {
                    "description": "A100s",
                    "scheduler": {"sequencer": "drf", "scorers": ["dispersed"]},
                },
            ),
            (
                "PUT",
                "/v1/images/localhost/jobgate-jupyter:latest",
                {"service_ports": "jupyter:http:8888"},
            ),
            ("POST", "/v1/projects", {"name": "vision"}),
            ("POST", "/v1/projects/vision/members", {"user": "alice"}),
            ("PATCH", "/v1/projects/vision", {"share": 2}),
            (
                "PUT",
                "/v1/policies/user/alice",
                {"max_sessions": 3, "max_slots": {"cpu": 8, "mem": "32g"}},
            ),
            ("PUT", "/v1/policies/project/vision", {"max_pending": 50, "max_priority": 70}),
            ("PUT", "/v1/policies/user/*", {"max_sessions": 10}),
            (
                "PUT",
                "/v1/budgets/project/vision",
                {"period": "week", "limits": {"gpu": 100}, "members": {"alice": {"gpu": 60}}},
            ),
            (
                "PUT",
                "/v1/auth/providers/corp",
                {
                    "issuer": "https://idp.example.com/realms/corp",
                    "client_id": "jobgate-console",
                    "client_secret": CLIENT_SECRET,
                    "cli_client_id": "jobgate-cli",
                    "display_name": "Corp SSO",
                    "groups_claim": "roles",
                },
            ),
            (
                "PUT",
                "/v1/auth/providers/lab",
                {"issuer": "http://127.0.0.1:9/lab", "client_id": "lab", "client_secret": ""},
            ),
            (
                "PUT",
                "/v1/auth/providers/corp/bindings/ml-team",
                {"value": "ml-team", "project": "vision"},
            ),
            (
                "PUT",
                "/v1/auth/providers/corp/bindings/ops",
                {"claim": "email_domain", "value": "ops.example.com", "role": "admin"},
            ),
        ]
        for method, path, body in calls:
            r = await api.request(method, path, json=body)
            assert r.status_code in (200, 201), (path, r.text)


def sections(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if isinstance(v, list)}


async def test_export_then_import_twice_into_another_deployment(
    kstack: Stack, redis_url: str, tmp_path: Path
) -> None:
    stack = kstack
    await configure(stack)
    file = tmp_path / "jobgate-config.json"
    done = await cli(stack, "export", str(file))
    assert done.returncode == 0, done.stderr
    text = file.read_text()
    doc = json.loads(text)
    assert doc["format"] == "jobgate-config"
    assert doc["version"] == 1
    assert doc["secrets"] == "excluded"
    assert stack.admin_key not in text
    assert "jg_" not in text
    assert "key" not in {f for items in sections(doc).values() for i in items for f in i}
    groups = {g["name"]: g for g in doc["resource_groups"]}
    assert groups["gpu"]["scheduler"] == {"sequencer": "drf", "scorers": ["dispersed"]}
    assert {"name": "alice", "role": "user"} in doc["users"]
    assert {"name": "vision", "members": ["alice"], "share": 2} in doc["projects"]
    alice = next(p for p in doc["policies"] if p["subject"] == "alice")
    assert alice["max_sessions"] == 3
    vision = next(p for p in doc["policies"] if p["subject"] == "vision")
    assert (vision["max_pending"], vision["max_priority"]) == (50, 70)
    assert doc["images"][0]["apps"]["jupyter"]["port"] == 8888
    assert doc["budgets"] == [
        {
            "scope": "project",
            "subject": "vision",
            "period": "week",
            "window": "calendar",
            "limits": {"gpu": 100.0},
            "members": {"alice": {"gpu": 60.0}},
        }
    ]
    # identity providers without their client secrets, then their binding rules
    assert CLIENT_SECRET not in text
    assert doc["sso_providers"] == [
        {
            "name": "corp",
            "display_name": "Corp SSO",
            "issuer": "https://idp.example.com/realms/corp",
            "client_id": "jobgate-console",
            "cli_client_id": "jobgate-cli",
            "scopes": "openid profile email",
            "username_claim": "preferred_username",
            "groups_claim": "roles",
            "client_secret": "excluded",
        },
        {
            "name": "lab",
            "display_name": "lab",
            "issuer": "http://127.0.0.1:9/lab",
            "client_id": "lab",
            "cli_client_id": "",
            "scopes": "openid profile email",
            "username_claim": "preferred_username",
            "groups_claim": "groups",
            "client_secret": None,
        },
    ]
    assert doc["sso_bindings"] == [
        {
            "provider": "corp",
            "name": "ml-team",
            "claim": "roles",
            "value": "ml-team",
            "project": "vision",
            "role": "user",
        },
        {
            "provider": "corp",
            "name": "ops",
            "claim": "email_domain",
            "value": "ops.example.com",
            "role": "admin",
            "project": None,
        },
    ]
    assert list(doc)[-2:] == ["sso_providers", "sso_bindings"]

    # a second deployment: its own SQLite database, gateway and Redis database (and no
    # secrets key: the file brings no secret to seal)
    parts = urlsplit(redis_url)
    other = tmp_path / "other"
    other.mkdir()
    url = f"sqlite+aiosqlite:///{other / 'jobgate.db'}"
    await upgrade_async(url)
    second = Stack(url, urlunsplit(parts._replace(path="/6")), other)
    await second.bootstrap()
    await second.start_gateway()
    try:
        first = await cli(second, "import", str(file))
        assert first.returncode == 0, first.stderr
        assert "created resource group gpu" in first.stdout
        assert "created policy user/alice" in first.stdout
        assert " 0 updated" in first.stdout
        assert "created identity provider corp" in first.stdout
        assert "created binding rule corp/ops" in first.stdout
        # the admin is told which provider lacks the secret it had (and only that one)
        notes = [line for line in first.stdout.splitlines() if line.startswith("note: ")]
        assert len(notes) == 1, first.stdout
        assert "jobgate admin sso set corp" in notes[0]
        again = await cli(second, "export", "-")
        assert again.returncode == 0, again.stderr
        copied = json.loads(again.stdout)
        # everything came across (the second one's own admin user aside), but the secret
        copied["users"] = [u for u in copied["users"] if u["name"] != "admin"]
        doc["users"] = [u for u in doc["users"] if u["name"] != "admin"]
        assert copied["sso_providers"][0].pop("client_secret") is None
        assert doc["sso_providers"][0].pop("client_secret") == "excluded"
        assert sections(copied) == sections(doc)

        repeat = await cli(second, "import", str(file))
        assert repeat.returncode == 0, repeat.stderr
        # 2 groups, 1 image, 3 users (admin too), 1 project, 3 policies, 1 budget,
        # 2 providers, 2 binding rules: nothing
        assert repeat.stdout.strip().endswith("0 created, 0 updated, 15 unchanged, 0 skipped")
        assert "note: identity provider corp had a client secret" in repeat.stdout
        listed = await cli(second, "import", "-o", "json", str(file))
        assert json.loads(listed.stdout)["sections"]["sso_bindings"] == {
            "unchanged": ["corp/ml-team", "corp/ops"]
        }

        changed = json.loads(text)
        next(p for p in changed["policies"] if p["subject"] == "alice")["max_sessions"] = 5
        file.write_text(json.dumps(changed))
        third = await cli(second, "import", str(file))
        assert third.returncode == 0, third.stderr
        assert "updated policy user/alice" in third.stdout
        assert "0 created, 1 updated, 14 unchanged" in third.stdout
        async with second.client() as api:
            got = (await api.get("/v1/policies")).json()
        assert next(p for p in got if p["subject"] == "alice")["max_sessions"] == 5

        # files this jobgate cannot read are refused before anything is written
        corp = changed["sso_providers"][0]
        for bad, message in [
            ({**changed, "version": 2}, "newer than this jobgate reads"),
            ({**changed, "templates": []}, "sections this jobgate does not know: templates"),
            ({**changed, "users": [{"name": "x"}]}, "users[0]: lacks role"),
            (
                {**changed, "sso_providers": [{**corp, "client_secret": "s3cret"}]},
                'sso_providers[0]: client_secret must be "excluded" or null',
            ),
            ({"format": "other"}, "not a jobgate configuration file"),
        ]:
            file.write_text(json.dumps(bad))
            refused = await cli(second, "import", str(file))
            assert refused.returncode == 1
            assert message in refused.stderr
    finally:
        await second.close()
