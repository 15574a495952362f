"""User secrets through the real gateway on PostgreSQL, with a worker in its own process
(docs/secrets.md): sealed at rest, never answered back, fetched by the node that runs the
session, masked in the stored logs."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from harness import NODE_TOKEN, Stack, started_stack
from pydantic import SecretStr
from redis.asyncio import Redis

from gateway.domain.sealing import MasterKey, Sealed, SealingError, associated_data, open_value

VALUE = "hf_Sup3rS3cretT0ken_9f8e7d6c"
ROTATED = "hf_R0tatedT0ken_a1b2c3d4e5"
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
    assert "2 secret(s) rewrapped, 0 already under the new key" in out, out
    again = await _run_cli(
        env, "admin", "secrets", "rekey", "--new-key-file", str(tmp_path / "new.key")
    )
    assert "0 secret(s) rewrapped, 2 already" in again, again
    old = MasterKey.from_base64(KEY)
    url = stack.settings.effective_database_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT * FROM secrets ORDER BY name")
    finally:
        await conn.close()
    for row in rows:
        sealed = Sealed(bytes(row["ciphertext"]), bytes(row["wrapped_key"]), row["key_id"])
        aad = associated_data(row["id"], row["name"])
        assert row["key_id"] == new.key_id
        assert open_value(new, aad, sealed) == (VALUE + row["name"]).encode()
        with pytest.raises(SealingError):
            open_value(old, aad, sealed)
    # a wrong current key changes nothing
    wrong = env | {"JOBGATE_SECRETS_KEY": MasterKey.generate().to_base64()}
    other = tmp_path / "other.key"
    other.write_text(MasterKey.generate().to_base64())
    failed = await _run_cli(
        wrong, "admin", "secrets", "rekey", "--new-key-file", str(other), ok=False
    )
    assert "nothing was changed" in failed, failed


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
