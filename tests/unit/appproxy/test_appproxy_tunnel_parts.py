"""The tunnel's small parts: frame boundaries in a byte stream, corked writes."""

from __future__ import annotations

import asyncio
import struct

import pytest

from appproxy.backend.tunnel import FrameBoundary, close_frame
from appproxy.corked import CorkedTransport, uncorked


def frame(opcode: int, payload: bytes, *, masked: bool = False) -> bytes:
    """One final frame as RFC 6455 lays it out (7-, 16- or 64-bit lengths)."""
    size = len(payload)
    mask_bit = 0x80 if masked else 0
    if size < 126:
        head = bytes((0x80 | opcode, mask_bit | size))
    elif size < 65536:
        head = bytes((0x80 | opcode, mask_bit | 126)) + struct.pack("!H", size)
    else:
        head = bytes((0x80 | opcode, mask_bit | 127)) + struct.pack("!Q", size)
    if masked:
        key = b"\x01\x02\x03\x04"
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        head += key
    return head + payload


STREAM = [
    frame(0x1, b"hello"),
    frame(0x2, bytes(300)),  # 16-bit length
    frame(0x2, bytes(70_000)),  # 64-bit length
    frame(0x9, b"", masked=True),
    frame(0x1, b"x" * 125, masked=True),
]


@pytest.mark.parametrize("cut", [1, 2, 3, 7, 64, 1000, 65_536])
def test_boundaries_are_found_however_the_stream_is_cut(cut: int) -> None:
    data = b"".join(STREAM)
    ends = set()
    total = 0
    for piece in STREAM:
        total += len(piece)
        ends.add(total)
    frames = FrameBoundary()
    for start in range(0, len(data), cut):
        chunk = data[start : start + cut]
        frames.feed(chunk)
        position = start + len(chunk)
        assert frames.at_boundary == (position in ends), position
    assert not frames.closed


def test_a_close_frame_is_noticed() -> None:
    frames = FrameBoundary()
    frames.feed(frame(0x1, b"bye") + close_frame(1000, "done"))
    assert frames.closed
    assert frames.at_boundary


def test_close_frame_carries_code_and_reason() -> None:
    data = close_frame(4001, "r" * 200)  # a reason is cut to fit a control frame
    assert data[0] == 0x88
    assert data[1] == len(data) - 2 <= 125
    assert struct.unpack("!H", data[2:4]) == (4001,)


class Recorder:
    """A transport that records what reaches it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


async def test_writes_of_one_loop_step_leave_together() -> None:
    raw = Recorder()
    corked = CorkedTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    corked.write(b"HTTP/1.1 200 OK\r\n\r\n")
    corked.write(b"body")
    assert raw.writes == []
    assert corked.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\nbody")
    await asyncio.sleep(0)
    assert raw.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    corked.write(b"next")
    await asyncio.sleep(0)
    assert raw.writes[-1] == b"next"
    assert corked.get_extra_info("peername") == "info:peername"  # the rest is delegated


async def test_close_sends_what_is_held_and_abort_drops_it() -> None:
    loop = asyncio.get_running_loop()
    raw = Recorder()
    corked = CorkedTransport(raw, loop)  # type: ignore[arg-type]
    corked.write(b"last words")
    corked.close()
    assert raw.writes == [b"last words"]
    assert raw.closed
    other = Recorder()
    corked = CorkedTransport(other, loop)  # type: ignore[arg-type]
    corked.write(b"never")
    corked.abort()
    await asyncio.sleep(0)
    assert other.writes == []
    assert other.aborted


async def test_an_upgraded_connection_gets_the_real_transport() -> None:
    raw = Recorder()
    corked = CorkedTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    corked.write(b"pending")
    assert uncorked(corked) is raw
    assert raw.writes == [b"pending"]  # flushed before anyone writes to it directly
