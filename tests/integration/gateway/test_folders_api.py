"""/v1/folders over real HTTP on PostgreSQL: files in and out (tus uploads resumed,
ranged downloads), hostile paths and planted links, permissions and shares, byte
quotas, mounts resolved at submit, automount, and removal refused while mounted.

One story per test: the stack is expensive, the assertions are cheap.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from harness import Stack

from contract.folders import STALE_UPLOAD_S
from gateway.services.folderfs import FolderFS
from jobgate.client import Client
from jobgate.profile import Profile
from jobgate.transfer import CHUNK, Item, upload

TUS = {"Tus-Resumable": "1.0.0"}
APPEND = {**TUS, "Content-Type": "application/offset+octet-stream"}


def meta(path: str) -> str:
    return "path " + base64.b64encode(path.encode()).decode()


async def start_upload(
    api: httpx.AsyncClient, folder: str, path: str, length: int
) -> httpx.Response:
    return await api.post(
        f"/v1/folders/{folder}/uploads",
        headers={**TUS, "Upload-Length": str(length), "Upload-Metadata": meta(path)},
    )


async def put_file(api: httpx.AsyncClient, folder: str, path: str, data: bytes) -> None:
    created = await start_upload(api, folder, path, len(data))
    assert created.status_code == 201, created.text
    if data:
        done = await api.patch(
            created.headers["location"], content=data, headers={**APPEND, "Upload-Offset": "0"}
        )
        assert done.status_code == 204, done.text


async def test_files_in_and_out_hostile_paths_shares_quota_and_mounts(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    root = stack.settings.effective_folders_root
    async with stack.client(alice) as a, stack.client(bob) as b, stack.client() as admin:
        # -- create: names are checked at the edge; one name per owner -----------------
        made = await a.post("/v1/folders", json={"name": "data", "usage": "data"})
        assert made.status_code == 201, made.text
        folder = made.json()
        assert (folder["owner"], folder["permission"], folder["automount"]) == (
            "user alice",
            "wd",
            False,
        )
        assert (root / folder["id"]).is_dir()  # the directory is the id, never the name
        again = await a.post("/v1/folders", json={"name": "data"})
        assert again.status_code == 409
        for bad in ("../x", "a/b", "", "x" * 65, "..", ".", "-x", "a b", "/abs", "é"):
            r = await a.post("/v1/folders", json={"name": bad})
            assert r.status_code == 422, bad
            assert r.json()["field"] == "name"

        # -- a resumable upload: the first MiB, a wrong offset, HEAD, the rest ---------
        payload = os.urandom(3 * 1024 * 1024 + 17)
        created = await start_upload(a, "data", "in/raw.bin", len(payload))
        assert created.status_code == 201, created.text
        location = created.headers["location"]
        assert location.startswith("/v1/uploads/")
        first = await a.patch(
            location, content=payload[: 1 << 20], headers={**APPEND, "Upload-Offset": "0"}
        )
        assert first.status_code == 204
        assert first.headers["upload-offset"] == str(1 << 20)
        assert not (root / folder["id"] / "in" / "raw.bin").exists()  # not before the end
        stale = await a.patch(location, content=b"x", headers={**APPEND, "Upload-Offset": "0"})
        assert stale.status_code == 409
        assert (await b.head(location)).status_code == 404  # someone else's upload
        head = await a.head(location, headers=TUS)
        assert head.headers["upload-offset"] == str(1 << 20)
        assert head.headers["upload-length"] == str(len(payload))
        plain = await a.patch(
            location, content=b"x", headers={**TUS, "Upload-Offset": str(1 << 20)}
        )
        assert plain.status_code == 415
        rest = await a.patch(
            location,
            content=payload[1 << 20 :],
            headers={**APPEND, "Upload-Offset": str(1 << 20)},
        )
        assert rest.status_code == 204
        assert (await a.head(location)).status_code == 404  # finished: gone
        got = await a.get("/v1/folders/data/files/in/raw.bin")
        assert got.status_code == 200
        assert hashlib.sha256(got.content).digest() == hashlib.sha256(payload).digest()
        part = await a.get("/v1/folders/data/files/in/raw.bin", headers={"Range": "bytes=10-19"})
        assert part.status_code == 206
        assert part.content == payload[10:20]
        assert part.headers["content-range"] == f"bytes 10-19/{len(payload)}"
        tail = await a.get("/v1/folders/data/files/in/raw.bin", headers={"Range": "bytes=-5"})
        assert tail.content == payload[-5:]
        beyond = await a.get(
            "/v1/folders/data/files/in/raw.bin", headers={"Range": f"bytes={len(payload)}-"}
        )
        assert beyond.status_code == 416
        listed = (await a.get("/v1/folders/data/files", params={"recursive": True})).json()
        assert [(e["path"], e["type"], e["size"]) for e in listed["items"]] == [
            ("in", "dir", 0),
            ("in/raw.bin", "file", len(payload)),
        ]
        await put_file(a, "data", "empty.txt", b"")
        assert (await a.get("/v1/folders/data/files/empty.txt")).content == b""
        moved = await a.post("/v1/folders/data/move", json={"source": "empty.txt", "target": "e/x"})
        assert moved.status_code == 204
        clash = await a.post(
            "/v1/folders/data/move", json={"source": "e/x", "target": "in/raw.bin"}
        )
        assert clash.status_code == 409

        # -- hostile paths: refused in every operation, nothing leaves the folder ------
        hostile = [
            "../escape",
            "../../etc/passwd",
            "/etc/passwd",
            "in/../../x",
            "in/./raw.bin",
            "a//b",
            "..",
            ".",
            "x" * 256,
            "in/" + "y" * 4097,
        ]
        for path in hostile:
            up = await start_upload(a, "data", path, 1)
            assert up.status_code == 422, (path, up.text)
            ls = await a.get("/v1/folders/data/files", params={"path": path})
            assert ls.status_code == (200 if path == "." else 422), path  # ".": the folder
            mv = await a.post("/v1/folders/data/move", json={"source": "e/x", "target": path})
            assert mv.status_code == 422, path
            mk = await a.post("/v1/folders/data/mkdir", json={"path": path})
            assert mk.status_code == 422, path
            # %2e%2e reaches the route as "..": httpx would resolve a literal one itself
            raw = quote(path, safe="").replace(".", "%2e")
            for method in ("GET", "DELETE"):
                r = await a.request(method, f"/v1/folders/data/files/{raw}")
                assert r.status_code in (404, 422), (method, path, r.status_code)
        assert not (root / "escape").exists()
        assert not (root.parent / "escape").exists()

        # links a session planted: listed as links, never followed, removable as links
        outside = root.parent / "outside"
        outside.mkdir()
        (outside / "secret").write_text("not yours")
        (root / folder["id"] / "to-secret").symlink_to(outside / "secret")
        (root / folder["id"] / "to-outside").symlink_to(outside)
        types = {
            e["path"]: e["type"] for e in (await a.get("/v1/folders/data/files")).json()["items"]
        }
        assert types["to-secret"] == types["to-outside"] == "symlink"
        for path in ("to-secret", "to-outside/secret"):
            r = await a.get(f"/v1/folders/data/files/{path}")
            assert r.status_code == 422, path
            assert "symbolic link" in r.json()["detail"]
            assert "not yours" not in r.text
        link = await a.get("/v1/folders/data/files", params={"path": "to-outside"})
        assert [e["type"] for e in link.json()["items"]] == ["symlink"]  # itself, not its target
        assert (await start_upload(a, "data", "to-outside/new", 1)).status_code == 422
        assert (
            await a.post("/v1/folders/data/mkdir", json={"path": "to-outside/d"})
        ).status_code == 422
        r = await a.post(
            "/v1/folders/data/move", json={"source": "to-outside/secret", "target": "s"}
        )
        assert r.status_code == 422
        assert (await a.delete("/v1/folders/data/files/to-outside")).status_code == 204
        assert (await a.delete("/v1/folders/data/files/to-secret")).status_code == 204
        assert (outside / "secret").read_text() == "not yours"  # the link went, not its target

        # -- permissions: unshared is invisible; ro reads only; owners share -----------
        hidden = await b.get("/v1/folders/data")
        assert hidden.status_code == 404
        assert hidden.json()["detail"] == "no folder 'data'"
        assert (await b.get(f"/v1/folders/{folder['id']}/files")).status_code == 404
        assert [f["name"] for f in (await b.get("/v1/folders")).json()["items"]] == []
        shared = await a.put("/v1/folders/data/shares/bob", json={"perm": "ro"})
        assert shared.status_code == 200
        assert shared.json()["shares"] == {"bob": "ro"}
        seen = (await b.get("/v1/folders")).json()["items"]
        assert [(f["name"], f["owner"], f["permission"]) for f in seen] == [
            ("data", "user alice", "ro")
        ]
        assert (await b.get("/v1/folders/data/files/in/raw.bin")).content == payload
        assert (await start_upload(b, "data", "bob.txt", 1)).status_code == 403
        assert (await b.delete("/v1/folders/data/files/in/raw.bin")).status_code == 403
        assert (await b.put("/v1/folders/data/shares/bob", json={"perm": "wd"})).status_code == 403
        assert (await b.delete("/v1/folders/data")).status_code == 403

        # -- the byte quota: refused before a byte is written, with the numbers --------
        used = len(payload)
        policy = await admin.patch("/v1/policies/user/alice", json={"max_folder_bytes": used + 100})
        assert policy.status_code == 200
        assert policy.json()["max_folder_bytes"] == used + 100
        over = await start_upload(a, "data", "more.bin", 1000)
        assert over.status_code == 413
        body = over.json()
        assert (body["quota"], body["used"], body["requested"]) == (used + 100, used, 1000)
        assert "over its quota" in body["detail"]
        assert (await start_upload(a, "data", "fits.bin", 100)).status_code == 201
        # over the quota (a session wrote past it): no new writable mount, read-only is fine
        await admin.patch("/v1/policies/user/alice", json={"max_folder_bytes": used - 1})
        blocked = await a.post(
            "/v1/sessions", json={"command": ["true"], "folders": [{"name": "data"}]}
        )
        assert blocked.status_code == 429
        assert "over its quota" in blocked.json()["detail"]
        reading = await stack.submit(
            alice, command=["true"], starts_at="+1h", folders=[{"name": "data", "read_only": True}]
        )
        assert reading["folders"][0]["read_only"] is True
        await admin.patch("/v1/policies/user/alice", json={"max_folder_bytes": None})

        # -- mounts at submit: names to ids, ro shares mount ro, dot-folders everywhere --
        dot = await a.post("/v1/folders", json={"name": ".local"})
        assert dot.status_code == 201
        assert dot.json()["automount"] is True
        later = {"command": ["true"], "starts_at": "+1h"}  # stays PENDING: nothing to run
        mine = await stack.submit(alice, **later, folders=[{"name": "data"}])
        assert [
            (f["name"], f["target"], f["read_only"], f["automount"]) for f in mine["folders"]
        ] == [
            ("data", "/home/work/data", False, False),
            (".local", "/home/work/.local", False, True),
        ]
        bare = await stack.submit(alice, **later, automount=False)
        assert bare["folders"] == []
        theirs = await stack.submit(bob, **later, folders=[{"name": "data", "target": "/in"}])
        assert [(f["target"], f["read_only"]) for f in theirs["folders"]] == [("/in", True)]
        assert theirs["folders"][0]["id"] == folder["id"]
        for bad, status, field in (
            ({"name": "nope"}, 404, "folders.0.name"),
            ({"name": "data", "target": "relative"}, 422, "folders.0.target"),
            ({"name": "data", "target": "/x/../y"}, 422, "folders.0.target"),
        ):
            r = await b.post("/v1/sessions", json={"command": ["true"], "folders": [bad]})
            assert r.status_code == status, bad
            assert r.json()["field"] == field
        twice = await a.post(
            "/v1/sessions",
            json={
                "command": ["true"],
                "folders": [{"name": "data"}, {"name": ".local", "target": "/home/work/data"}],
            },
        )
        assert twice.status_code == 422
        assert "two folders" in twice.json()["detail"]

        # -- removal: refused while mounted (naming the sessions), then trash and purge --
        shown = (await a.get("/v1/folders/data")).json()
        assert shown["size"] == used
        assert shown["shares"] == {"bob": "ro"}
        live = sorted([mine["id"], theirs["id"], reading["id"]])
        assert sorted(shown["sessions"]) == live
        refused = await a.delete("/v1/folders/data")
        assert refused.status_code == 409
        assert sorted(refused.json()["sessions"]) == live
        for s, key in ((mine, alice), (theirs, bob), (reading, alice)):
            async with stack.client(key) as api:
                assert (await api.delete(f"/v1/sessions/{s['id']}")).status_code == 202
        assert (await a.post("/v1/folders/data/purge")).status_code == 409  # not in the trash
        trashed = await a.delete("/v1/folders/data")
        assert trashed.status_code == 200
        assert trashed.json()["trashed_at"]
        assert (await a.get("/v1/folders/data/files")).status_code == 409
        r = await a.post("/v1/sessions", json={"command": ["true"], "folders": [{"name": "data"}]})
        assert r.status_code == 409
        assert "trash" in r.json()["detail"]
        assert [
            f["name"]
            for f in (await a.get("/v1/folders", params={"trashed": True})).json()["items"]
        ] == ["data"]
        assert (await a.post("/v1/folders/data/restore")).status_code == 200
        assert (await a.get("/v1/folders/data/files/in/raw.bin")).content == payload
        assert (await a.delete("/v1/folders/data")).status_code == 200
        assert (await a.post("/v1/folders/data/purge")).status_code == 204
        assert not (root / folder["id"]).exists()
        assert (await a.get("/v1/folders/data")).status_code == 404
        again = await a.post("/v1/folders", json={"name": "data"})
        assert again.status_code == 201  # free again
        (root / again.json()["id"]).rmdir()  # its directory gone from disk: it holds nothing
        gone = await a.get("/v1/folders/data")
        assert gone.status_code == 200, gone.text
        assert gone.json()["size"] == 0

        # uploads abandoned for a day are collected (this one and fits.bin, never sent)
        left = await start_upload(a, "data", "abandoned.bin", 10)
        assert left.status_code == 201
        fs = FolderFS(root)
        assert fs.remove_stale_uploads(time.time() + 2 * STALE_UPLOAD_S, STALE_UPLOAD_S) == 2
        assert (await a.head(left.headers["location"])).status_code == 404

    # a node that cannot bind-mount runs the session without its automount folders
    await stack.start_worker("n1", worker_runtime="process")
    plain = await stack.submit(alice, command=["true"])
    assert [f["name"] for f in plain["folders"]] == [".local"]
    await stack.wait_status(plain["id"], {"SUCCEEDED"})


async def test_an_interrupted_put_resumes_on_the_next_run_and_a_changed_file_starts_over(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    key = await stack.create_user("carol")
    async with stack.client(key) as c:
        assert (await c.post("/v1/folders", json={"name": "big"})).status_code == 201
    api = Client(Profile(url=stack.url, api_key=key), timeout=60)
    patches: list[int] = []  # the Upload-Offset of every PATCH, as the gateway saw it

    def seen(request: httpx.Request) -> None:
        if request.method == "PATCH":
            patches.append(int(request.headers["Upload-Offset"]))

    api.http.event_hooks["request"].append(seen)
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(3 * CHUNK + 5))
    item = Item(local, "big.bin", local.stat().st_size)

    def ctrl_c_after(limit: int) -> Callable[[int], None]:
        counted = 0

        def advance(n: int) -> None:
            nonlocal counted
            counted += n
            if counted > limit:
                raise KeyboardInterrupt

        return advance

    # Ctrl-C part-way: the gateway keeps what arrived, the CLI remembers where (0600).
    # Two chunks sent are more than loopback's socket buffers hold, so the gateway was
    # already appending (and holding the upload's lock) when the client went away.
    with pytest.raises(KeyboardInterrupt):
        await asyncio.to_thread(upload, api, "big", item, ctrl_c_after(2 * CHUNK + 1))
    memos = list((tmp_path / "cache" / "jobgate" / "uploads").glob("*.json"))
    assert len(memos) == 1
    assert stat.S_IMODE(memos[0].stat().st_mode) == 0o600
    location = json.loads(memos[0].read_text())["location"]

    # the same put again: it resumes where the gateway is, never from 0
    patches.clear()
    await asyncio.to_thread(upload, api, "big", item, lambda n: None)
    assert patches[0] > 0
    assert 0 not in patches
    async with stack.client(key) as c:
        assert (await c.get("/v1/folders/big/files/big.bin")).content == local.read_bytes()
        assert (await c.head(location)).status_code == 404  # finished
    assert not memos[0].exists()

    # interrupted again, then the file changes: the stale part is ended, the new file sent
    with pytest.raises(KeyboardInterrupt):
        await asyncio.to_thread(upload, api, "big", item, ctrl_c_after(CHUNK + 1))
    stale = json.loads(memos[0].read_text())["location"]
    local.write_bytes(os.urandom(CHUNK + 7))
    changed = Item(local, "big.bin", local.stat().st_size)
    patches.clear()
    await asyncio.to_thread(upload, api, "big", changed, lambda n: None)
    assert patches[0] == 0
    async with stack.client(key) as c:
        assert (await c.head(stale)).status_code == 404  # tus termination: nothing left
        assert (await c.get("/v1/folders/big/files/big.bin")).content == local.read_bytes()
    uploads = stack.settings.effective_folders_root / ".uploads"
    assert list(uploads.glob("*.part")) == []
    api.close()
