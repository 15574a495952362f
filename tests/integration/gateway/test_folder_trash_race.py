"""A folder moved to the trash while creates that mount it are being written (PostgreSQL).

A create checks its folders before its rows wait for the group commit; a trash that
commits in between must not leave a live session mounting a folder in the trash. The
trash here is held open (its row locked and ``trashed_at`` set, as ``folders rm``
does) until the creates are waiting on the database, then committed: the create that
mounts the folder fails with a 409 naming it, the others written with it succeed.
"""

from __future__ import annotations

import asyncio

import asyncpg
from harness import Stack

BODY = {"command": ["true"], "resources": {"cpu": "0.1", "mem": "64m"}, "starts_at": "+1h"}


async def waiting_on_locks(conn: asyncpg.Connection) -> int:
    found: int = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return found


async def test_a_trash_racing_a_create_batch_fails_only_the_create_that_mounts_it(
    stack: Stack,
) -> None:
    async with stack.client() as api:
        for name in ("doomed", "kept"):
            r = await api.post("/v1/folders", json={"name": name})
            assert r.status_code == 201, r.text
        folder_id = (await api.get("/v1/folders/doomed")).json()["id"]
        trash = await asyncpg.connect(
            stack.settings.effective_database_url.replace("postgresql+asyncpg://", "postgresql://")
        )
        try:
            tx = trash.transaction()
            await tx.start()
            await trash.execute("SELECT id FROM folders WHERE id = $1 FOR UPDATE", folder_id)
            await trash.execute("UPDATE folders SET trashed_at = now() WHERE id = $1", folder_id)
            creates = [
                asyncio.create_task(api.post("/v1/sessions", json={**BODY, "folders": folders}))
                for folders in (
                    [{"name": "kept"}],
                    [{"name": "doomed"}],
                    [],
                    [{"name": "kept"}, {"name": "doomed"}],
                    [],
                )
            ]
            # the creates were checked (the trash is not committed) and now wait on its lock
            for _ in range(2000):
                if await waiting_on_locks(trash) or all(t.done() for t in creates):
                    break
                await asyncio.sleep(0.005)
            await tx.commit()
        finally:
            await trash.close()
        answers = await asyncio.gather(*creates)
        statuses = [r.status_code for r in answers]
        assert statuses == [201, 409, 201, 409, 201], [r.text for r in answers]
        for refused in (answers[1], answers[3]):
            problem = refused.json()
            assert refused.headers["content-type"] == "application/problem+json"
            assert problem["field"] == "folders"
            # (one still being checked when the trash committed is refused by the check)
            assert "folder 'doomed'" in problem["detail"]
            assert "trash" in problem["detail"]
        listed = (await api.get("/v1/sessions")).json()["items"]
        assert sorted(s["id"] for s in listed) == sorted(answers[i].json()["id"] for i in (0, 2, 4))
        mounted = {f["name"] for s in listed for f in s["folders"]}
        assert mounted == {"kept"}
