"""User secrets through the real gateway on PostgreSQL, with a worker in its own process
(docs/secrets.md): sealed at rest, never answered back, fetched by the node that runs the
session, masked in the stored logs."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from harness import NODE_TOKEN, Stack, started_stack
from pydantic import SecretStr
from redis.asyncio import Redis
from waiting import until

from contract.keys import ENDPOINT_WAKE_CHANNEL, endpoint_wake_key
from gateway.auth import KeyCache
from gateway.db.models import OidcProvider
from gateway.domain.errors import Conflict
from gateway.domain.sealing import (
    MasterKey,
    Sealed,
    SealingError,
    associated_data,
    open_value,
    seal,
)
from gateway.services.oidc import OidcService, _secret_aad

VALUE = "hf_Sup3rS3cretT0ken_9f8e7d6c"
ROTATED = "hf_R0tatedT0ken_a1b2c3d4e5"
OTHER = "hf_An0therT0ken_0a9b8c7d6e"
KEY = base64.b64encode(os.urandom(32)).decode()


@pytest.fixture
async def sstack(pg_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    async with started_stack(pg_url, redis_url, tmp_path, secrets_key=SecretStr(KEY)) as s:
        yield s


async def _db_text(stack: Stack) -> str:
    """Every row of every table, as text (the value must be in none of them)."""
    url = stack.settings.effective_database_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(url)
    try:
        tables = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        )
        out = []
        for t in tables:
            rows = await conn.fetch(f'SELECT t::text AS r FROM "{t["tablename"]}" t')
            out += [r["r"] for r in rows]
        return "\n".join(out)
    finally:
        await conn.close()


async def _stored_logs(stack: Stack, session_id: str) -> bytes:
    url = stack.settings.effective_database_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT data FROM session_logs WHERE session_id = $1 ORDER BY id", session_id
        )
        return b"".join(bytes(r["data"]) for r in rows)
    finally:
        await conn.close()


async def _redis_bytes(stack: Stack) -> bytes:
    """Every string, list, stream and hash value in the stack's Redis."""
    redis = Redis.from_url(stack.redis_url)
    out = []
    try:
        async for key in redis.scan_iter(count=500):
            kind = (await redis.type(key)).decode()
            if kind == "string":
                out.append(await redis.get(key) or b"")
            elif kind == "list":
                out += await redis.lrange(key, 0, -1)
            elif kind == "hash":
                out += list((await redis.hgetall(key)).values())
            elif kind == "zset":
                out += await redis.zrange(key, 0, -1)
            elif kind == "stream":
                for _, fields in await redis.xrange(key):
                    out += list(fields.values())
    finally:
        await redis.aclose()
    return b"\n".join(out)


async def test_create_list_rotate_remove_and_nobody_elses(sstack: Stack) -> None:
    stack = sstack
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    async with stack.client(alice) as api:
        r = await api.post("/v1/secrets", json={"name": "HF_TOKEN", "value": VALUE})
        assert r.status_code == 201, r.text
        made = r.json()
        assert set(made) == {"name", "owner", "project", "created_at", "updated_at"}
        assert made["owner"] == "user alice"
        again = await api.post("/v1/secrets", json={"name": "HF_TOKEN", "value": VALUE})
        assert again.status_code == 409, again.text
        short = await api.post("/v1/secrets", json={"name": "X", "value": "abc"})
        assert short.status_code == 422, short.text
        listed = await api.get("/v1/secrets")
        assert [s["name"] for s in listed.json()] == ["HF_TOKEN"]
        r = await api.put("/v1/secrets/HF_TOKEN", json={"value": ROTATED})
        assert r.status_code == 200, r.text
        assert r.json()["updated_at"] >= made["updated_at"]
        answers = [made, again.json(), listed.json(), r.json()]
    for body in answers:
        assert VALUE not in str(body)
        assert ROTATED not in str(body)
    async with stack.client(bob) as api:  # bob sees none of alice's
        assert (await api.get("/v1/secrets")).json() == []
        r = await api.put("/v1/secrets/HF_TOKEN", json={"value": "whatever"})
        assert r.status_code == 404, r.text
        assert (await api.delete("/v1/secrets/HF_TOKEN")).status_code == 404
        r = await api.post(
            "/v1/sessions",
            json={"command": ["true"], "secrets": [{"name": "HF_TOKEN"}]},
        )
        assert r.status_code == 422, r.text
        assert "HF_TOKEN" in r.json()["detail"]
    async with stack.client(alice) as api:
        r = await api.post(
            "/v1/sessions", json={"command": ["true"], "secrets": [{"name": "NOPE"}]}
        )
        assert r.status_code == 422, r.text
        assert "'NOPE'" in r.json()["detail"], r.text
        assert (await api.delete("/v1/secrets/HF_TOKEN")).status_code == 204
        assert (await api.get("/v1/secrets")).json() == []
    # nothing kept the values: not the secrets table (sealed), not the audit log
    text = await _db_text(stack)
    assert VALUE not in text
    assert ROTATED not in text
    assert "secrets-create" in text  # the audit log has the call, without the body


async def test_project_secrets_are_seen_by_members(sstack: Stack) -> None:
    stack = sstack
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    async with stack.client() as admin:
        assert (await admin.post("/v1/projects", json={"name": "lab"})).status_code == 201
        r = await admin.post("/v1/projects/lab/members", json={"user": "alice"})
        assert r.status_code == 200, r.text
    async with stack.client(alice) as api:
        r = await api.post(
            "/v1/secrets", json={"name": "WANDB_KEY", "value": VALUE, "project": "lab"}
        )
        assert r.status_code == 201, r.text
        assert r.json()["owner"] == "project lab", r.text
        assert [s["name"] for s in (await api.get("/v1/secrets")).json()] == ["WANDB_KEY"]
    async with stack.client(bob) as api:
        r = await api.post(
            "/v1/secrets", json={"name": "WANDB_KEY", "value": VALUE, "project": "lab"}
        )
        assert r.status_code == 403, r.text
        assert (await api.get("/v1/secrets")).json() == []


JOB = (
    "import os; print('env', os.environ['HF_TOKEN'], flush=True); "
    "print('file', open(os.path.join(os.environ['JOBGATE_SECRETS_DIR'], 'kube')).read(), "
    "flush=True); "
    "print('mode', oct(os.stat(os.path.join(os.environ['JOBGATE_SECRETS_DIR'], 'kube'))"
    ".st_mode & 0o777), flush=True); "
    "import sys; sys.stdout.write(os.environ['HF_TOKEN'][:7]); sys.stdout.flush(); "
    "import time; time.sleep(0.5); sys.stdout.write(os.environ['HF_TOKEN'][7:] + ' split\\n')"
)


async def test_a_job_gets_its_secrets_and_its_logs_show_stars(
    sstack: Stack, tmp_path: Path
) -> None:
    stack = sstack
    worker = await stack.start_worker_process("n1")
    alice = await stack.create_user("alice")
    value_file = tmp_path / "kube.txt"
    value_file.write_text("apiVersion: v1\nkubeconfig-" + VALUE[3:] + "\n")
    # the CLI: create from a file, list without values
    (tmp_path / "v").write_text(VALUE)
    out = await stack.cli("secrets", "create", "hf", "--from-file", str(tmp_path / "v"), key=alice)
    assert "created secret hf" in out
    out = await stack.cli("secrets", "create", "kube", "--from-file", str(value_file), key=alice)
    listed = await stack.cli("secrets", "ls", key=alice)
    assert "hf" in listed
    assert "kube" in listed
    assert VALUE not in listed
    session = await stack.submit(
        alice,
        command=["python3", "-c", JOB],
        secrets=[{"name": "hf", "env": "HF_TOKEN"}, {"name": "kube", "path": "/run/secrets/kube"}],
    )
    assert VALUE not in str(session)
    done = await stack.wait_status(session["id"], {"SUCCEEDED", "FAILED"}, timeout=60)
    logs = await stack.logs(session["id"], key=alice)
    assert done["status"] == "SUCCEEDED", logs
    assert "env ***" in logs, logs
    assert "file ***" in logs, logs  # a file's value is the whole file: masked whole
    assert "mode 0o400" in logs, logs
    assert "*** split" in logs, logs  # printed in two pieces, half a second apart
    assert VALUE not in logs
    assert VALUE[3:] not in logs
    stored = await _stored_logs(stack, session["id"])
    assert b"***" in stored
    assert VALUE.encode() not in stored
    assert VALUE[7:].encode() not in stored
    cli_logs = await stack.cli("sessions", "logs", session["id"], key=alice)
    assert "env ***" in cli_logs
    assert VALUE not in cli_logs
    # nowhere else either: no API answer, no row, nothing in Redis (start jobs, events,
    # live logs), not the worker's log, not its saved kernel state
    async with stack.client(alice) as api:
        shown = (await api.get(f"/v1/sessions/{session['id']}")).text
    assert VALUE not in shown
    assert VALUE not in await _db_text(stack)
    assert VALUE.encode() not in await _redis_bytes(stack)
    assert VALUE not in worker.log()
    for path in worker.state_dir.rglob("*.json"):
        if "process" not in path.relative_to(worker.state_dir).parts:
            assert VALUE not in path.read_text(errors="replace"), path
    assert not any(worker.state_dir.rglob("secrets/*/kube"))  # removed with the kernel


async def test_another_nodes_credential_cannot_fetch_them(sstack: Stack) -> None:
    stack = sstack
    await stack.start_worker_process("n1")
    alice = await stack.create_user("alice")
    async with stack.client(alice) as api:
        r = await api.post("/v1/secrets", json={"name": "HF_TOKEN", "value": VALUE})
        assert r.status_code == 201, r.text
    session = await stack.submit(
        alice,
        command=["python3", "-c", "import time; time.sleep(30)"],
        secrets=[{"name": "HF_TOKEN"}],
    )
    running = await stack.wait_status(session["id"], {"RUNNING"}, timeout=60)
    kernel_id = running["kernels"][0]["id"]
    async with stack.client("") as anon:
        joined = await anon.post(
            "/v1/internal/nodes/join",
            json={"node_id": "intruder"},
            headers={"Authorization": f"Bearer {NODE_TOKEN}"},
        )
        assert joined.status_code == 200, joined.text
        other = {"Authorization": f"Bearer {joined.json()['credential']}"}
        r = await anon.get(f"/v1/internal/kernels/{kernel_id}/secrets", headers=other)
        assert r.status_code == 403, r.text
        assert VALUE not in r.text
        r = await anon.get(
            f"/v1/internal/kernels/{kernel_id}/secrets",
            headers={"Authorization": f"Bearer {alice}"},
        )
        assert r.status_code == 401, r.text
    async with stack.client(alice) as api:
        await api.delete(f"/v1/sessions/{session['id']}", params={"force": True})


async def test_without_a_key_secrets_are_refused_and_nothing_else_breaks(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    async with stack.client(alice) as api:
        r = await api.post("/v1/secrets", json={"name": "HF_TOKEN", "value": VALUE})
        assert r.status_code == 409, r.text
        assert "JOBGATE_SECRETS_KEY" in r.json()["detail"]
        assert (await api.get("/v1/secrets")).json() == []
    session = await stack.submit(alice, command=["true"])
    assert session["status"] == "PENDING"


async def test_rekey_wraps_every_secret_under_a_new_key(sstack: Stack, tmp_path: Path) -> None:
    stack = sstack
    alice = await stack.create_user("alice")
    async with stack.client(alice) as api:
        for name in ("ONE", "TWO"):
            r = await api.post("/v1/secrets", json={"name": name, "value": VALUE + name})
            assert r.status_code == 201, r.text
    async with stack.client() as api:  # an identity provider's client secret, sealed alike
        r = await api.put(
            "/v1/auth/providers/corp",
            json={"issuer": "https://idp.example.com", "client_id": "c", "client_secret": OTHER},
        )
        assert r.status_code == 201, r.text
    new = MasterKey.generate()
    (tmp_path / "new.key").write_text(new.to_base64() + "\n")
    env = {
        "JOBGATE_DATABASE_URL": stack.database_url,
        "JOBGATE_SECRETS_KEY": KEY,
        "JOBGATE_DATA_DIR": str(tmp_path / "cli"),
    }
    out = await _run_cli(
        env, "admin", "secrets", "rekey", "--new-key-file", str(tmp_path / "new.key")
    )
    assert (
        "2 secret(s) and 1 provider secret(s) rewrapped, 0 and 0 already under the new key" in out
    ), out
    again = await _run_cli(
        env, "admin", "secrets", "rekey", "--new-key-file", str(tmp_path / "new.key")
    )
    assert "0 secret(s) and 0 provider secret(s) rewrapped, 2 and 1 already" in again, again
    old = MasterKey.from_base64(KEY)
    rows, providers = await _sealed_rows(stack)
    for row in rows:
        sealed = Sealed(bytes(row["ciphertext"]), bytes(row["wrapped_key"]), row["key_id"])
        aad = associated_data(row["id"], row["name"])
        assert row["key_id"] == new.key_id
        assert open_value(new, aad, sealed) == (VALUE + row["name"]).encode()
        with pytest.raises(SealingError):
            open_value(old, aad, sealed)
    (corp,) = providers
    assert corp.secret_key_id == new.key_id
    assert _oidc(new)._secret(corp) == OTHER  # what the console's code flow sends
    with pytest.raises(Conflict, match="does not open with the secrets key"):
        _oidc(old)._secret(corp)  # a 409 naming the provider, not a 500
    # a wrong current key changes nothing
    wrong = env | {"JOBGATE_SECRETS_KEY": MasterKey.generate().to_base64()}
    other = tmp_path / "other.key"
    other.write_text(MasterKey.generate().to_base64())
    failed = await _run_cli(
        wrong, "admin", "secrets", "rekey", "--new-key-file", str(other), ok=False
    )
    assert "nothing was changed" in failed, failed
    # nor does a provider's secret the current key does not open, though every user
    # secret opens (they are rewrapped first, then rolled back with it)
    stray = MasterKey.generate()
    resealed = seal(stray, _secret_aad(corp.id, corp.name), OTHER.encode())
    url = stack.settings.effective_database_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "UPDATE oidc_providers SET secret_ciphertext = $1, secret_wrapped_key = $2, "
            "secret_key_id = $3 WHERE id = $4",
            resealed.ciphertext,
            resealed.wrapped_key,
            resealed.key_id,
            corp.id,
        )
    finally:
        await conn.close()
    current = env | {"JOBGATE_SECRETS_KEY": new.to_base64()}
    failed = await _run_cli(
        current, "admin", "secrets", "rekey", "--new-key-file", str(other), ok=False
    )
    assert "nothing was changed" in failed, failed
    after, (still,) = await _sealed_rows(stack)
    assert [(r["key_id"], bytes(r["wrapped_key"])) for r in after] == [
        (r["key_id"], bytes(r["wrapped_key"])) for r in rows
    ]
    assert (still.secret_key_id, still.secret_wrapped_key) == (
        stray.key_id,
        resealed.wrapped_key,
    )


async def _sealed_rows(stack: Stack) -> tuple[list[asyncpg.Record], list[OidcProvider]]:
    """The secrets' rows, and the providers' as the service reads them."""
    url = stack.settings.effective_database_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT * FROM secrets ORDER BY name")
        found = await conn.fetch("SELECT * FROM oidc_providers ORDER BY name")
    finally:
        await conn.close()
    columns = ("id", "name", "secret_ciphertext", "secret_wrapped_key", "secret_key_id")
    providers = [OidcProvider(**{c: p[c] for c in columns}) for p in found]
    return list(rows), providers


def _oidc(master: MasterKey) -> OidcService:
    """The service as a gateway holding *master* has it (only its sealing is used here)."""
    return OidcService(None, KeyCache(0), master, None, key_ttl_s=60)  # type: ignore[arg-type]


# -- endpoints and templates --------------------------------------------------------------
#: a replica that prints its token (masked in the stored log) and a digest that tells
#: which value it received, then stays up
REPLICA = (
    "import hashlib, os, time; v = os.environ['HF_TOKEN']; "
    "print('token', v, 'sha', hashlib.sha256(v.encode()).hexdigest()[:16], flush=True); "
    "time.sleep(120)"
)
ENDPOINT = {
    "name": "demo",
    "port": 8000,
    "command": ["python3", "-c", REPLICA],
    "resources": {"cpu": "0.1", "mem": "64m"},
}


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


async def _replica_of(api: httpx.AsyncClient, name: str, revision: int) -> str:
    """The session id of *name*'s first replica of *revision* (once the controller made it)."""

    async def found() -> str | None:
        shown = (await api.get(f"/v1/endpoints/{name}")).json()
        ids = [r["session_id"] for r in shown["replicas"] if r["revision"] == revision]
        return ids[0] if ids else None

    return await until(found, timeout=30, interval=0.2, what=f"a replica of revision {revision}")


async def test_an_endpoints_replicas_get_the_owners_secrets_masked(sstack: Stack) -> None:
    stack = sstack
    worker = await stack.start_worker_process("n1")
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    async with stack.client(alice) as api, stack.client(bob) as other:
        for name, value in (("hf", VALUE), ("hf2", OTHER)):
            r = await api.post("/v1/secrets", json={"name": name, "value": value})
            assert r.status_code == 201, r.text
        # another user's secret, or none by that name: a 422 naming it, nothing made
        r = await other.post("/v1/endpoints", json={**ENDPOINT, "secrets": [{"name": "hf"}]})
        assert (r.status_code, r.json()["field"]) == (422, "secrets"), r.text
        assert "'hf'" in r.json()["detail"], r.text
        r = await api.post("/v1/endpoints", json={**ENDPOINT, "secrets": [{"name": "NOPE"}]})
        assert (r.status_code, r.json()["field"]) == (422, "secrets"), r.text
        assert "'NOPE'" in r.json()["detail"], r.text
        assert (await api.get("/v1/endpoints")).json() == []

        body = {**ENDPOINT, "secrets": [{"name": "hf", "env": "HF_TOKEN"}]}
        r = await api.post("/v1/endpoints", json=body)
        assert r.status_code == 201, r.text
        assert r.json()["current"]["secrets"] == [{"name": "hf", "env": "HF_TOKEN", "path": None}]
        first = await _replica_of(api, "demo", 1)
        logs = await stack.wait_output(first, f"sha {_sha(VALUE)}", timeout=60)
        assert "token *** sha" in logs, logs

        # a new revision with another secret: its replicas receive the new value
        r = await api.post(
            "/v1/endpoints/demo/revisions", json={"secrets": [{"name": "hf2", "env": "HF_TOKEN"}]}
        )
        assert r.status_code == 200, r.text
        assert [s["name"] for s in r.json()["current"]["secrets"]] == ["hf2"]
        second = await _replica_of(api, "demo", 2)
        logs = await stack.wait_output(second, f"sha {_sha(OTHER)}", timeout=60)
        assert "token *** sha" in logs, logs
        # and another change keeps the secrets of the revision it starts from
        r = await api.post("/v1/endpoints/demo/revisions", json={"env": {"V": "3"}})
        assert r.status_code == 200, r.text
        assert [s["name"] for s in r.json()["current"]["secrets"]] == ["hf2"]
        async with stack.client() as admin:  # its command would run with alice's values
            r = await admin.post("/v1/endpoints/demo/revisions", json={"env": {"V": "4"}})
            assert (r.status_code, r.json()["field"]) == (403, "secrets"), r.text
        answers = [
            (await api.get("/v1/endpoints/demo")).text,
            (await api.get("/v1/endpoints")).text,
            (await api.get(f"/v1/sessions/{first}")).text,
        ]
    for text in answers:
        assert VALUE not in text
        assert OTHER not in text
    for session_id in (first, second):
        stored = await _stored_logs(stack, session_id)
        assert b"token *** sha" in stored
        assert VALUE.encode() not in stored
        assert OTHER.encode() not in stored
    text = await _db_text(stack)
    assert VALUE not in text
    assert OTHER not in text
    assert VALUE.encode() not in await _redis_bytes(stack)
    assert VALUE not in worker.log()


async def test_a_replica_whose_secret_was_deleted_fails_naming_it(sstack: Stack) -> None:
    """The revision holds the secret by id: deleted since, the next replica is an ERROR
    at birth with the reason (no start without it, no crash loop); a new revision looks
    for it by name again."""
    stack = sstack
    alice = await stack.create_user("alice")
    async with stack.client(alice) as api:
        r = await api.post("/v1/secrets", json={"name": "GONE", "value": VALUE})
        assert r.status_code == 201, r.text
        cold = {**ENDPOINT, "name": "cold", "secrets": [{"name": "GONE"}]}
        cold["autoscale"] = {"min_replicas": 0, "max_replicas": 1}
        r = await api.post("/v1/endpoints", json=cold)
        assert r.status_code == 201, r.text
        endpoint_id = r.json()["id"]
        assert (await api.delete("/v1/secrets/GONE")).status_code == 204
        redis = Redis.from_url(stack.redis_url)
        try:
            await redis.set(endpoint_wake_key(endpoint_id), str(time.time()), nx=True, ex=60)
            await redis.publish(ENDPOINT_WAKE_CHANNEL, endpoint_id)
        finally:
            await redis.aclose()

        async def unavailable() -> dict[str, Any] | None:
            e: dict[str, Any] = (await api.get("/v1/endpoints/cold")).json()
            return e if e["status"] == "UNAVAILABLE" else None

        e = await until(unavailable, timeout=20, interval=0.2, what="unavailable")
        assert "secret(s) 'GONE' deleted since the revision was made" in e["status_reason"]
        r = await api.post("/v1/endpoints/cold/revisions", json={"env": {"V": "2"}})
        assert (r.status_code, r.json()["field"]) == (422, "secrets"), r.text
        assert "'GONE'" in r.json()["detail"]
        r = await api.post("/v1/endpoints/cold/revisions", json={"secrets": []})
        assert r.status_code == 200, r.text
        assert r.json()["current"]["secrets"] == []


async def test_a_templates_secrets_are_checked_at_create_and_given_at_run(sstack: Stack) -> None:
    stack = sstack
    await stack.start_worker_process("n1")
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    job = ["python3", "-c", "import os; print('token', os.environ['HF_TOKEN'], flush=True)"]
    template = {
        "name": "infer",
        "session": {
            "command": job,
            "resources": {"cpu": "0.1", "mem": "64m"},
            "secrets": [{"name": "hf", "env": "HF_TOKEN"}],
        },
    }
    async with stack.client(alice) as api, stack.client(bob) as other:
        r = await api.post("/v1/templates", json=template)  # alice has no hf yet
        assert (r.status_code, r.json()["field"]) == (422, "secrets"), r.text
        assert "'hf'" in r.json()["detail"], r.text
        assert (await api.get("/v1/templates")).json() == []
        r = await api.post("/v1/secrets", json={"name": "hf", "value": VALUE})
        assert r.status_code == 201, r.text
        r = await other.post("/v1/templates", json=template)  # alice's: not bob's to name
        assert (r.status_code, r.json()["field"]) == (422, "secrets"), r.text
        r = await api.post("/v1/templates", json=template)
        assert r.status_code == 201, r.text
        assert VALUE not in r.text
        r = await api.post("/v1/templates/infer/run", json={})
        assert r.status_code == 201, r.text
        session = r.json()
    done = await stack.wait_status(session["id"], {"SUCCEEDED", "FAILED"}, timeout=60)
    logs = await stack.logs(session["id"], key=alice)
    assert done["status"] == "SUCCEEDED", logs
    assert "token ***" in logs, logs
    assert VALUE.encode() not in await _stored_logs(stack, session["id"])
    # deleted since the template was made: its run is a 422 naming it, as any create
    async with stack.client(alice) as api:
        assert (await api.delete("/v1/secrets/hf")).status_code == 204
        r = await api.post("/v1/templates/infer/run", json={})
        assert (r.status_code, r.json()["field"]) == (422, "secrets"), r.text
        assert "'hf'" in r.json()["detail"], r.text


async def _run_cli(env: dict[str, str], *args: str, ok: bool = True) -> str:
    """``jobgate ARGS`` as an operator runs it on the gateway's host (no API key)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jobgate",
        *args,
        env=os.environ | env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert (proc.returncode == 0) == ok, out.decode()
    return out.decode()
