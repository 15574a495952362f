"""api/tus.py's byte paths without a server: an upload's pieces reach the disk in order
however many and however small (``writev`` takes IOV_MAX at a time), and a download on
a server without ``http.response.zerocopy`` streams the same bytes it would send by
``sendfile`` (the integration tests run the gateway's own protocol, which has it)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from gateway.api import tus
from gateway.api.tus import CHUNK, IOV_MAX, FileRange, _write_all


def test_many_small_pieces_are_written_in_order(tmp_path: Path) -> None:
    pieces = [bytes([i % 251]) * (1 + i % 7) for i in range(3 * IOV_MAX + 5)]
    target = tmp_path / "out"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        _write_all(fd, pieces)
    finally:
        os.close(fd)
    assert target.read_bytes() == b"".join(pieces)


def test_a_short_write_keeps_the_rest_of_its_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.writev

    def at_most_five(fd: int, buffers: list[memoryview]) -> int:
        joined = b"".join(buffers)[:5]
        return real(fd, [joined])

    monkeypatch.setattr(tus.os, "writev", at_most_five)
    target = tmp_path / "out"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        _write_all(fd, [b"abc", b"defghij", b"", b"klmnopqrstu"])
    finally:
        os.close(fd)
    assert target.read_bytes() == b"abcdefghijklmnopqrstu"


@pytest.mark.parametrize(
    ("header", "start", "end"),
    [(None, 0, CHUNK + 99), ("bytes=3-5", 3, 5), (f"bytes={CHUNK - 1}-", CHUNK - 1, CHUNK + 99)],
)
async def test_without_zerocopy_the_range_is_streamed(
    tmp_path: Path, header: str | None, start: int, end: int
) -> None:
    data = os.urandom(CHUNK + 100)
    path = tmp_path / "file"
    path.write_bytes(data)

    async def get(request: Request) -> FileRange:
        assert "http.response.zerocopy" not in request.scope.get("extensions", {})
        fd = os.open(path, os.O_RDONLY)
        headers = {"Content-Length": str(end - start + 1)}
        return FileRange(fd, start, end, status_code=200, headers=headers)

    app = Starlette(routes=[Route("/f", get)])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        headers = {"Range": header} if header else {}
        got = await client.get("/f", headers=headers)
    assert got.content == data[start : end + 1]
    assert got.headers["content-type"] == "application/octet-stream"
