"""The audit log (``GET /v1/audit``, ``jobgate admin audit``): every state-changing call
leaves a row saying who (user and credential), what (operation id and target), from
where and with what answer, refusals included; never a secret; only admins read it; old
rows are pruned."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from harness import Stack
from sqlalchemy import insert, select, text, update
from sqlalchemy.exc import DBAPIError
from waiting import until

from gateway.db.engine import create_engine, create_session_factory
from gateway.db.models import AuditRecord
from gateway.services.audit import prune_audit

CALLBACK_SECRET = "whsec_" + base64.b64encode(b"audit-callback-secret-123").decode()


async def _audit(stack: Stack, **params: Any) -> list[dict[str, Any]]:
    async with stack.client() as api:
        r = await api.get("/v1/audit", params=params)
        assert r.status_code == 200, r.text
        items: list[dict[str, Any]] = r.json()["items"]
        return items


async def _settled(stack: Stack, count: int) -> list[dict[str, Any]]:
    """The rows, once there are *count*: a row is written just after its answer is sent."""

    async def written() -> list[dict[str, Any]] | None:
        rows = await _audit(stack)
        assert len(rows) <= count, rows
        return rows if len(rows) == count else None

    return await until(written, timeout=10, what=f"{count} audit rows")


async def _table_text(stack: Stack) -> str:
    """Every row of the table, every column, as one text."""
    engine = create_engine(stack.settings.effective_database_url)
    try:
        async with create_session_factory(engine)() as db:
            rows = (await db.execute(text("SELECT * FROM audit_log"))).all()
    finally:
        await engine.dispose()
    assert rows
    return "\n".join(" ".join(str(value) for value in row) for row in rows)


def _one(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    found = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, (match, rows)
    return found[0]


async def test_every_state_change_leaves_a_row_and_no_secret(any_stack: Stack) -> None:
    stack = any_stack
    alice = await stack.create_user("alice")  # admin: POST /v1/users, POST …/keys
    async with stack.client(alice) as api:
        r = await api.post("/v1/keys", json={"name": "ci", "scopes": ["sessions"]})
        assert r.status_code == 201, r.text
        ci = r.json()
        r = await api.post(
            "/v1/sessions",
            json={
                "command": ["true"],
                "resources": {"cpu": "0.1", "mem": "64m"},
                "callback_url": "https://example.com/hook",
                "callback_secret": CALLBACK_SECRET,
            },
        )
        assert r.status_code == 201, r.text
        session = r.json()
        r = await api.post(
            "/v1/webhooks", json={"url": "https://example.com/w", "events": ["session.failed"]}
        )
        assert r.status_code == 201, r.text
        webhook_secret = r.json()["secret"]
        assert (await api.delete(f"/v1/sessions/{session['id']}")).status_code in (200, 202)
        assert (await api.post("/v1/users", json={"name": "mallory"})).status_code == 403
        assert (await api.get("/v1/sessions")).status_code == 200  # a read: no row
        assert (await api.get("/v1/audit")).status_code == 403  # admins only
        assert (await api.delete("/v1/keys/ci")).status_code == 204
        assert (await api.put(f"/v1/sessions/{session['id']}", json={})).status_code == 405
    bogus = "jg_" + "x" * 43
    async with stack.client(bogus) as api:
        assert (await api.post("/v1/sessions", json={"command": ["true"]})).status_code == 401
    async with stack.client("") as api:
        assert (await api.delete("/v1/sessions/nothing")).status_code == 401
    async with stack.client("not-a-node") as api:
        r = await api.post("/v1/internal/kernels/k1/logs", json={"items": []})
        assert r.status_code in (401, 422), r.text

    rows = await _settled(stack, 12)
    admin_row = _one(rows, action="users-create", status=201)
    assert admin_row["user"] == "admin"
    assert admin_row["credential"].startswith("key ")
    assert admin_row["credential"].endswith(f"({stack.admin_key[:9]})")
    assert admin_row["client"] == "127.0.0.1"
    assert (admin_row["method"], admin_row["path"]) == ("POST", "/v1/users")
    assert admin_row["target"].startswith("id=")
    made_key = _one(rows, action="keys-create")
    assert (made_key["user"], made_key["status"], made_key["target"]) == (
        "alice",
        201,
        f"id={ci['id']}",
    )
    assert made_key["credential"] == f"key test ({alice[:9]})"
    created = _one(rows, action="sessions-create", status=201)
    assert created["target"] == f"id={session['id']}"
    terminated = _one(rows, action="sessions-terminate", user="alice")
    assert terminated["target"] == f"session_id={session['id']}"
    assert terminated["path"] == f"/v1/sessions/{session['id']}"
    assert _one(rows, action="users-create", status=403)["user"] == "alice"
    revoked = _one(rows, action="keys-revoke")
    assert (revoked["user"], revoked["status"], revoked["target"]) == ("alice", 204, "name=ci")
    refused = _one(rows, action="sessions-create", status=401)
    assert refused["user"] is None
    assert refused["credential"] == "refused key jg_xxxxxx"
    anonymous = _one(rows, action="sessions-terminate", status=401)
    assert (anonymous["user"], anonymous["credential"]) == (None, "none")
    unmatched = _one(rows, action="unmatched")  # not the path's other route
    assert (unmatched["method"], unmatched["status"]) == ("PUT", 405)
    node = _one(rows, action="internal-append-logs")
    assert node["user"] is None
    assert node["credential"].startswith("refused")
    assert not [r for r in rows if r["method"] == "GET"]
    assert [r["id"] for r in rows] == sorted((r["id"] for r in rows), reverse=True)

    stored = await _table_text(stack)
    for secret in (alice, ci["key"], stack.admin_key, bogus, CALLBACK_SECRET, webhook_secret):
        assert secret not in stored
    assert bogus[:9] in stored  # what is kept of a refused key: its shown prefix


async def test_filters_and_pages(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    await stack.create_user("bob")
    for _ in range(3):
        await stack.submit(alice, command=["true"])
    await _settled(stack, 7)  # 2 users and their keys, 3 sessions
    mine = await _audit(stack, user="alice")
    assert [r["action"] for r in mine] == ["sessions-create"] * 3
    made = await _audit(stack, action="users-create")
    assert [r["target"].split("=")[0] for r in made] == ["id", "id"]
    assert await _audit(stack, user="bob") == []
    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    assert await _audit(stack, **{"from": later}) == []
    assert len(await _audit(stack, to=later, action="sessions-create")) == 3
    async with stack.client() as api:
        r = await api.get("/v1/audit", params={"user": "alice", "limit": 2})
        page = r.json()
        assert len(page["items"]) == 2
        assert page["next_cursor"] is not None
        r = await api.get(
            "/v1/audit", params={"user": "alice", "limit": 2, "cursor": page["next_cursor"]}
        )
        rest = r.json()
        assert len(rest["items"]) == 1
        assert rest["next_cursor"] is None
        ids = [x["id"] for x in page["items"] + rest["items"]]
        assert ids == [x["id"] for x in mine]
        # bad filters: a 422 naming the parameter, never a 500
        for params, field in (
            ({"limit": 0}, "limit"),
            ({"limit": 100_000}, "limit"),
            ({"action": "DROP TABLE"}, "action"),
            ({"from": "yesterday"}, "from"),
            ({"cursor": "abc"}, "cursor"),
            ({"from": later, "to": later}, "from"),
            ({"to": "0001-01-01T00:00:00+01:00"}, "to"),
        ):
            r = await api.get("/v1/audit", params=params)
            assert r.status_code == 422, (params, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            assert field in r.text, r.text


async def test_the_cli_prints_the_rows(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    session = await stack.submit(alice, command=["true"])
    await _settled(stack, 3)
    shown = await stack.cli("admin", "audit", "--user", "alice", "--since", "1h")
    lines = shown.splitlines()
    assert lines[0].split() == [
        "TIME",
        "USER",
        "CREDENTIAL",
        "ACTION",
        "STATUS",
        "CLIENT",
        "TARGET",
    ]
    assert len(lines) == 2, shown
    for word in ("sessions-create", f"id={session['id']}", "key test (", " 201 "):
        assert word in lines[1], shown
    listed = json.loads(await stack.cli("admin", "audit", "--action", "users-create", "-o", "json"))
    assert [r["target"].startswith("id=") for r in listed] == [True]


async def test_old_rows_are_pruned_and_rows_never_change(stack: Stack) -> None:
    engine = create_engine(stack.settings.effective_database_url)
    db = create_session_factory(engine)
    now = datetime.now(UTC)
    row = {"credential": "", "method": "POST", "path": "/v1/x", "target": "", "client": ""}
    try:
        async with db() as session, session.begin():
            await session.execute(
                insert(AuditRecord),
                [
                    row | {"at": now - timedelta(days=40), "action": "old", "status": 200},
                    row | {"at": now - timedelta(days=40), "action": "old", "status": 201},
                    row | {"at": now - timedelta(days=10), "action": "new", "status": 200},
                ],
            )
        assert await prune_audit(db, 0) == 0  # 0: kept forever
        assert await prune_audit(db, 30, batch=1) == 2
        async with db() as session:
            left = (await session.execute(select(AuditRecord.action))).scalars().all()
        assert left == ["new"]
        with pytest.raises(DBAPIError, match="append-only"):
            async with db() as session, session.begin():
                await session.execute(update(AuditRecord).values(status=500))
        async with db() as session:
            assert (await session.execute(text("SELECT status FROM audit_log"))).scalar() == 200
    finally:
        await engine.dispose()


async def test_a_row_that_cannot_be_written_does_not_change_the_answer(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """The table gone (an outage of it alone): the call still answers 201, and the row
    is in the gateway's log as a WARNING instead."""

    async def logged() -> list[str]:
        return [m for m in caplog.messages if m.startswith("audit row not written")]

    engine = create_engine(stack.settings.effective_database_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE audit_log RENAME TO audit_log_away"))
        try:
            async with stack.client() as api:
                r = await api.post("/v1/projects", json={"name": "p1"})
            assert r.status_code == 201, r.text
            lost = await until(logged, timeout=10, what="the lost row logged")
        finally:
            async with engine.begin() as conn:
                await conn.execute(text("ALTER TABLE audit_log_away RENAME TO audit_log"))
    finally:
        await engine.dispose()
    assert len(lost) == 1, caplog.messages
    assert "projects-create" in lost[0]
    assert "'actor': 'admin'" in lost[0]


async def test_the_console_s_sign_in_and_writes_are_recorded(stack: Stack) -> None:
    alice = await stack.create_user("alice")  # 2 rows
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as browser:
        wrong = "jg_" + "y" * 43
        assert (await browser.post("/sign-in", data={"key": wrong})).status_code == 401
        assert (await browser.post("/sign-in", data={"key": alice})).status_code == 303
        page = await browser.get("/")
        found = re.search(r'name="csrf-token" content="([^"]+)"', page.text)
        assert found is not None
        body = {"command": ["true"]}
        assert (await browser.post("/v1/sessions", json=body)).status_code == 403  # no CSRF
        made = await browser.post(
            "/v1/sessions", json=body, headers={"X-CSRF-Token": found[1], "Origin": stack.url}
        )
        assert made.status_code == 201, made.text
    rows = await _settled(stack, 6)
    refused = _one(rows, action="console-sign-in", status=401)
    assert (refused["user"], refused["credential"]) == (None, "refused key jg_yyyyyy")
    signed = _one(rows, action="console-sign-in", status=303)
    assert (signed["user"], signed["credential"]) == ("alice", f"key test ({alice[:9]})")
    csrf = _one(rows, action="sessions-create", status=403)
    assert csrf["credential"].startswith("console sign-in, write refused")
    written = _one(rows, action="sessions-create", status=201)
    assert written["user"] == "alice"
    assert written["credential"] == f"console, key test ({alice[:9]})"
    assert written["target"] == f"id={made.json()['id']}"
    stored = await _table_text(stack)
    for secret in (alice, wrong, found[1]):
        assert secret not in stored
