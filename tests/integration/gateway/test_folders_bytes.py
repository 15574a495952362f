"""Data folder bytes on the fast paths, over real HTTP: downloads sent by ``sendfile``
(``http.response.zerocopy``, api/http11.py) equal the file byte for byte, whole and in
ranges across chunk boundaries, to a reader that stalls and after one that leaves; the
CLI's download (``http.client``, ``splice`` into the file) resumes with a Range; an
upload's body is spliced onto its part file (a chunked one written as it came), and a
body past its length or a length past the quota is refused with nothing half-written.
No timing here: the figures are ``benchmarks/folders.py``'s.
"""

from __future__ import annotations

import asyncio
import base64
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from harness import Stack
from waiting import until

import gateway.api.http11 as http11
import jobgate.transfer as transfer
from jobgate.client import Client
from jobgate.profile import Profile
from jobgate.transfer import CHUNK, Item, download, upload

TUS = {"Tus-Resumable": "1.0.0"}
APPEND = {**TUS, "Content-Type": "application/offset+octet-stream"}
SIZE = 3 * CHUNK + 12_345  # more than one sendfile burst, one pread, one write batch


def meta(path: str) -> str:
    return "path " + base64.b64encode(path.encode()).decode()


def sendfile_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sendfile"]


async def test_a_large_file_comes_back_byte_for_byte_whole_in_ranges_and_resumed(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    sent: list[tuple[int, int]] = []  # (offset, count) of each zero-copy send
    real_sendfile = http11._sendfile

    def spy(sock: int, file: int, offset: int, count: int, stop: threading.Event) -> int:
        sent.append((offset, count))
        return real_sendfile(sock, file, offset, count, stop)

    monkeypatch.setattr(http11, "_sendfile", spy)
    spliced: list[int] = []  # the bytes each upload spliced from the socket
    real_splice = http11._splice

    def splice_spy(
        sock: int, file: int, head: list[bytes], count: int, stop: threading.Event
    ) -> int:
        written = real_splice(sock, file, head, count, stop)
        spliced.append(written)
        return written

    monkeypatch.setattr(http11, "_splice", splice_spy)
    key = await stack.create_user("dora")
    async with stack.client(key) as c:
        assert (await c.post("/v1/folders", json={"name": "big"})).status_code == 201
    api = Client(Profile(url=stack.url, api_key=key), timeout=60)
    payload = os.urandom(SIZE)
    local = tmp_path / "big.bin"
    local.write_bytes(payload)
    await asyncio.to_thread(upload, api, "big", Item(local, "big.bin", SIZE), lambda n: None)
    assert spliced == [SIZE]  # one PATCH, its body spliced onto the part file

    # the CLI's download: whole, sent by the kernel
    back = tmp_path / "back.bin"
    await asyncio.to_thread(download, api, "big", "big.bin", back, lambda n: None)
    assert back.read_bytes() == payload
    assert sent == [(0, SIZE)]
    assert not back.with_name("back.bin.part").exists()

    # a connection lost after 8 MiB: the next request asks for the rest
    asked: list[int] = []
    real_fetch = transfer._fetch_direct

    def fetch(*args: object) -> None:
        asked.append(args[4])  # type: ignore[arg-type]
        real_fetch(*args)  # type: ignore[arg-type]

    counted = 0

    def drop_once(n: int) -> None:
        nonlocal counted
        counted += n
        if len(asked) == 1 and counted >= CHUNK:
            raise httpx.ReadError("connection lost")

    monkeypatch.setattr(transfer, "_fetch_direct", fetch)
    again = tmp_path / "again.bin"
    await asyncio.to_thread(download, api, "big", "big.bin", again, drop_once)
    assert len(asked) == 2
    assert asked[0] == 0
    assert CHUNK <= asked[1] < SIZE  # what had arrived is not asked for again
    assert again.read_bytes() == payload
    # without splice (not Linux; and always over TLS): readinto + write, same bytes
    monkeypatch.delattr(os, "splice")
    plain = tmp_path / "plain.bin"
    await asyncio.to_thread(download, api, "big", "big.bin", plain, lambda n: None)
    assert plain.read_bytes() == payload
    api.close()

    # ranges: within a chunk, across chunk boundaries, suffix, open, clamped, one byte
    url = "/v1/folders/big/files/big.bin"
    cases = {
        "bytes=0-0": (0, 0),
        f"bytes={CHUNK - 3}-{CHUNK + 2}": (CHUNK - 3, CHUNK + 2),
        f"bytes={CHUNK // 2}-{2 * CHUNK + 7}": (CHUNK // 2, 2 * CHUNK + 7),
        f"bytes=-{CHUNK + 5}": (SIZE - CHUNK - 5, SIZE - 1),
        f"bytes={SIZE - 10}-": (SIZE - 10, SIZE - 1),
        f"bytes=5-{SIZE + 100}": (5, SIZE - 1),
        f"bytes={SIZE - 1}-{SIZE - 1}": (SIZE - 1, SIZE - 1),
    }
    sent.clear()
    async with stack.client(key) as c:
        for header, (start, end) in cases.items():
            got = await c.get(url, headers={"Range": header})
            assert got.status_code == 206, header
            assert got.content == payload[start : end + 1], header
            assert got.headers["content-range"] == f"bytes {start}-{end}/{SIZE}", header
            assert got.headers["content-length"] == str(end - start + 1), header
        assert sent == [(s, e - s + 1) for s, e in cases.values()]
        whole = await c.get(url)
        assert (whole.status_code, whole.content) == (200, payload)
        beyond = await c.get(url, headers={"Range": f"bytes={SIZE}-"})
        assert beyond.status_code == 416
        assert beyond.headers["content-type"] == "application/problem+json"
        # an empty file: no zero-copy send, an empty 200
        created = await c.post(
            "/v1/folders/big/uploads",
            headers={**TUS, "Upload-Length": "0", "Upload-Metadata": meta("empty")},
        )
        assert created.status_code == 201
        empty = await c.get("/v1/folders/big/files/empty")
        assert (empty.status_code, empty.content) == (200, b"")
    await until(lambda: not sendfile_threads(), timeout=10, what="sendfile threads ended")


async def test_a_stalled_reader_gets_every_byte_and_one_that_leaves_frees_its_thread(
    stack: Stack,
) -> None:
    key = await stack.create_user("erin")
    payload = os.urandom(SIZE)
    async with stack.client(key) as c:
        assert (await c.post("/v1/folders", json={"name": "f"})).status_code == 201
        created = await c.post(
            "/v1/folders/f/uploads",
            headers={**TUS, "Upload-Length": str(SIZE), "Upload-Metadata": meta("f.bin")},
        )
        # one body in 1 MiB pieces: gathered, then written where they arrived
        pieces = [payload[i : i + (1 << 20)] for i in range(0, SIZE, 1 << 20)]

        async def body() -> AsyncIterator[bytes]:
            for piece in pieces:
                yield piece

        done = await c.patch(
            created.headers["location"],
            content=body(),
            headers={**APPEND, "Upload-Offset": "0", "Content-Length": str(SIZE)},
        )
        assert done.status_code == 204, done.text
        # no Content-Length (chunked): received and written piece by piece, same bytes
        chunked = await c.post(
            "/v1/folders/f/uploads",
            headers={**TUS, "Upload-Length": str(SIZE), "Upload-Metadata": meta("g.bin")},
        )
        done = await c.patch(
            chunked.headers["location"],
            content=body(),
            headers={**APPEND, "Upload-Offset": "0"},
        )
        assert done.status_code == 204, done.text
        assert (await c.get("/v1/folders/f/files/g.bin")).content == payload

    request = (
        f"GET /v1/folders/f/files/f.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n"
    ).encode()
    # a reader that stops for a while: the socket fills, the thread waits for room
    reader, writer = await asyncio.open_connection("127.0.0.1", stack.port)
    try:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert f"content-length: {SIZE}".encode() in head.lower()
        first = await reader.readexactly(1 << 16)
        await asyncio.sleep(0.5)
        rest = await reader.readexactly(SIZE - len(first))
        assert first + rest == payload
        # the same connection serves the next request (the response ended cleanly)
        writer.write(request.replace(b"\r\n\r\n", b"\r\nRange: bytes=-3\r\n\r\n"))
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 206"), head
        assert await reader.readexactly(3) == payload[-3:]
    finally:
        writer.close()
        await writer.wait_closed()

    # a reader that leaves part-way: its thread ends, the gateway serves on
    reader, writer = await asyncio.open_connection("127.0.0.1", stack.port)
    try:
        writer.write(request)
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(1 << 16)
    finally:
        writer.close()
        await writer.wait_closed()
    await until(lambda: not sendfile_threads(), timeout=10, what="the sendfile thread ended")
    async with stack.client(key) as c:
        got = await c.get("/v1/folders/f/files/f.bin")
        assert got.content == payload


async def test_a_body_past_its_length_or_a_length_past_the_quota_leaves_nothing_half_written(
    stack: Stack,
) -> None:
    key = await stack.create_user("fred")
    root = stack.settings.effective_folders_root
    async with stack.client(key) as c, stack.client() as admin:
        made = await c.post("/v1/folders", json={"name": "q"})
        assert made.status_code == 201
        folder = root / made.json()["id"]
        quota = 2 * CHUNK
        policy = await admin.patch("/v1/policies/user/fred", json={"max_folder_bytes": quota})
        assert policy.status_code == 200
        parts_before = set((root / ".uploads").glob("*.part"))

        # a length past the quota: refused before a byte is written
        over = await c.post(
            "/v1/folders/q/uploads",
            headers={**TUS, "Upload-Length": str(quota + 1), "Upload-Metadata": meta("x")},
        )
        assert over.status_code == 413
        assert over.headers["content-type"] == "application/problem+json"
        assert set((root / ".uploads").glob("*.part")) == parts_before

        # a length that fits, then a body in large pieces that runs past it
        length = CHUNK + 10
        created = await c.post(
            "/v1/folders/q/uploads",
            headers={**TUS, "Upload-Length": str(length), "Upload-Metadata": meta("y")},
        )
        assert created.status_code == 201
        location = created.headers["location"]
        too_long = os.urandom(length + CHUNK)
        refused = await c.patch(
            location, content=too_long, headers={**APPEND, "Upload-Offset": "0"}
        )
        assert 400 <= refused.status_code < 500, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["field"] == "Upload-Length"
        assert not (folder / "y").exists()  # never appears half-written
        head = await c.head(location, headers=TUS)
        held = int(head.headers["upload-offset"])
        assert held <= length
        # what the gateway holds is the body's start; the rest completes the file
        right = too_long[:length]
        done = await c.patch(
            location, content=right[held:], headers={**APPEND, "Upload-Offset": str(held)}
        )
        assert done.status_code == 204, done.text
        assert (folder / "y").read_bytes() == right
        assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) <= quota
