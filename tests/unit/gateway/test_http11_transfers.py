"""A transfer thread of the gateway's HTTP protocol never outlives a peer that stalls:
one that neither reads (download) nor sends (upload) for ``IDLE_S`` ends the transfer
with what moved so far, and its descriptors are closed."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from gateway.api import http11


def _ends(work: object, *args: object) -> int:
    """*work*(*args*) in a thread that must end by itself; what it returned."""
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(work(*args)))  # type: ignore[operator]
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the transfer thread waits for a stalled peer for ever"
    return result[0]


@pytest.fixture(autouse=True)
def _short_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http11, "IDLE_S", 0.3)
    monkeypatch.setattr(http11, "POLL_MS", 20)


def test_a_download_to_a_peer_that_stops_reading_ends(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(os.urandom(1 << 20) * 16)  # more than the socket buffers hold
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    with ours, peer, path.open("rb") as file:
        sent = _ends(
            http11._sendfile,
            os.dup(ours.fileno()),
            os.dup(file.fileno()),
            0,
            16 << 20,
            threading.Event(),
        )
    assert 0 < sent < 16 << 20


def test_an_upload_from_a_peer_that_stops_sending_keeps_what_arrived(tmp_path: Path) -> None:
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    peer.sendall(b"x" * 1000)  # then nothing more, and the peer stays connected
    target = tmp_path / "part"
    with ours, peer, target.open("wb") as file:
        written = _ends(
            http11._splice,
            os.dup(ours.fileno()),
            os.dup(file.fileno()),
            [b"head"],
            10_000,
            threading.Event(),
        )
    assert written == 1004
    assert target.read_bytes() == b"head" + b"x" * 1000
