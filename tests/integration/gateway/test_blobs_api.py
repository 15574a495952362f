"""/v1/blobs over real HTTP on PostgreSQL, and a working directory run by a real worker
that fetched it with its own node credential."""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

from harness import NODE_TOKEN, Stack

from jobgate.workdir import pack


def digest_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


async def test_blob_routes_and_a_session_that_runs_in_its_working_dir(
    stack: Stack, tmp_path: Path
) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "data.csv").write_text("4,5,6\n")
    (proj / "train.py").write_text("print('data', open('data.csv').read().strip())\n")
    packed = pack(proj)
    data = packed.path.read_bytes()
    packed.close()
    digest = packed.digest
    async with stack.client("") as anyone:  # a node that runs nothing of it
        joined = await anyone.post(
            "/v1/internal/nodes/join",
            json={"node_id": "idle"},
            headers={"Authorization": f"Bearer {NODE_TOKEN}"},
        )
        assert joined.status_code == 200, joined.text
    async with stack.client() as api, stack.client(joined.json()["credential"]) as node:
        missing = await api.head(f"/v1/blobs/{digest}")
        assert missing.status_code == 404
        put = await api.put(f"/v1/blobs/{digest}", content=data)
        assert put.status_code == 201, put.text
        assert put.headers["location"] == f"/v1/blobs/{digest}"
        again = await api.put(f"/v1/blobs/{digest}", content=data)
        assert again.status_code == 200  # already stored
        assert (await api.head(f"/v1/blobs/{digest}")).status_code == 200
        # only nodes read blobs back, and only those of sessions placed on them
        assert (await api.get(f"/v1/blobs/{digest}")).status_code == 401
        assert (await node.get(f"/v1/blobs/{digest}")).status_code == 403
        # the body must be what its name says
        wrong = await api.put(f"/v1/blobs/{digest_of(b'x')}", content=b"y")
        assert wrong.status_code == 422
        assert wrong.headers["content-type"] == "application/problem+json"
        assert "nothing was stored" in wrong.json()["detail"]
        bad_name = await api.put("/v1/blobs/sha256:nothex", content=b"y")
        assert bad_name.status_code == 422
        # without a key nothing goes in
        async with stack.client("") as anonymous:
            assert (
                await anonymous.put(f"/v1/blobs/{digest_of(b'z')}", content=b"z")
            ).status_code == 401

    await stack.start_worker("n1", worker_runtime="process")
    session = await stack.submit(command=["python3", "train.py"], working_dir=digest)
    assert session["working_dir"] == digest
    await stack.wait_status(session["id"], {"SUCCEEDED"})
    assert await stack.logs(session["id"]) == "data 4,5,6\n"

    # the gateway stores any bytes; the node refuses to unpack a tar that escapes
    hostile = io.BytesIO()
    with tarfile.open(fileobj=hostile, mode="w") as tar:
        entry = tarfile.TarInfo("../../escaped.txt")
        entry.size = 4
        tar.addfile(entry, io.BytesIO(b"evil"))
    evil = digest_of(hostile.getvalue())
    async with stack.client() as api:
        assert (await api.put(f"/v1/blobs/{evil}", content=hostile.getvalue())).status_code == 201
    bad = await stack.submit(command=["true"], working_dir=evil)
    ended = await stack.wait_status(bad["id"], {"ERROR"})
    assert "unsafe path: '../../escaped.txt'" in ended["status_reason"]
    assert not await asyncio.to_thread(lambda: list(tmp_path.rglob("escaped.txt")))


async def test_uploads_over_the_limit_are_413(stack: Stack) -> None:
    await stack.stop_gateway()
    stack.settings.max_blob_bytes = 1000
    await stack.start_gateway()
    data = b"x" * 2000
    async with stack.client() as api:
        declared = await api.put(f"/v1/blobs/{digest_of(data)}", content=data)
        assert declared.status_code == 413
        assert declared.headers["content-type"] == "application/problem+json"

        async def stream() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
            for _ in range(4):
                yield b"x" * 500

        streamed = await api.put(f"/v1/blobs/{digest_of(data)}", content=stream())
        assert streamed.status_code == 413
        assert (await api.head(f"/v1/blobs/{digest_of(data)}")).status_code == 404


async def test_the_gateway_collects_unreferenced_blobs_by_itself(stack: Stack) -> None:
    await stack.stop_gateway()
    stack.settings.blob_gc_interval_s = 0.2
    stack.settings.blob_gc_grace_s = 0.0
    await stack.start_gateway()
    data = b"a tree nobody submitted"
    async with stack.client() as api:
        assert (await api.put(f"/v1/blobs/{digest_of(data)}", content=data)).status_code == 201
        for _ in range(300):  # bounded: the loop runs every 0.2 s
            if (await api.head(f"/v1/blobs/{digest_of(data)}")).status_code == 404:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the unreferenced blob was never collected")
