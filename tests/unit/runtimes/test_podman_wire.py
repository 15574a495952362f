"""Log frames, per-stream offsets and pull progress, as Podman sends them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plugins.runtimes.base import ImageNotFound, LogChunk
from plugins.runtimes.podman.wire import (
    FrameDecoder,
    LogCursor,
    PullProgress,
    coalesce,
    pull_failure,
)

KINDS = {"stdout": 1, "stderr": 2}


def frame(stream: str, data: bytes) -> bytes:
    return bytes([KINDS.get(stream, 0), 0, 0, 0]) + len(data).to_bytes(4, "big") + data


frames_strategy = st.lists(
    st.tuples(st.sampled_from(["stdout", "stderr"]), st.binary(min_size=1, max_size=40)),
    max_size=20,
)


@given(frames=frames_strategy, cuts=st.lists(st.integers(min_value=0, max_value=2000)))
def test_frames_survive_any_chunking(frames: list[tuple[str, bytes]], cuts: list[int]) -> None:
    wire = b"".join(frame(s, d) for s, d in frames)
    points = sorted({c % (len(wire) + 1) for c in cuts} | {0, len(wire)})
    decoder = FrameDecoder()
    out: list[tuple[str, bytes]] = []
    for start, end in itertools.pairwise(points):
        out += decoder.feed(wire[start:end])
    assert out == frames
    assert decoder.pending == 0


def test_stdin_and_unknown_frames_are_dropped() -> None:
    wire = (
        frame("stdin", b"typed") + bytes([3, 0, 0, 0, 0, 0, 0, 1]) + b"x" + frame("stdout", b"ok")
    )
    assert FrameDecoder().feed(wire) == [("stdout", b"ok")]


def test_an_incomplete_frame_waits_for_the_rest() -> None:
    decoder = FrameDecoder()
    wire = frame("stderr", b"hello")
    assert decoder.feed(wire[:10]) == []
    assert decoder.pending == 10
    assert decoder.feed(wire[10:]) == [("stderr", b"hello")]


def test_coalesce_joins_runs_of_one_stream_in_order() -> None:
    frames = [("stdout", b"a"), ("stdout", b"b"), ("stderr", b"c"), ("stdout", b"d")]
    assert coalesce(frames) == [("stdout", b"ab"), ("stderr", b"c"), ("stdout", b"d")]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("offsets", "expected"),
    [
        pytest.param(
            {},
            [("stdout", 0, b"abc"), ("stderr", 0, b"XY"), ("stdout", 3, b"def")],
            id="from-the-start",
        ),
        pytest.param(
            {"stdout": 3}, [("stderr", 0, b"XY"), ("stdout", 3, b"def")], id="one-stream-shipped"
        ),
        pytest.param(
            {"stdout": 4, "stderr": 1},
            [("stderr", 1, b"Y"), ("stdout", 4, b"ef")],
            id="cut-inside-chunks",
        ),
        pytest.param({"stdout": 99, "stderr": 99}, [], id="everything-shipped"),
    ],
)
def test_cursor_skips_what_was_shipped(
    offsets: dict[str, int], expected: list[tuple[str, int, bytes]]
) -> None:
    cursor = LogCursor(offsets)
    chunks = [
        cursor.chunk("stdout", b"abc"),
        cursor.chunk("stderr", b"XY"),
        cursor.chunk("stdout", b"def"),
    ]
    assert [(c.stream, c.offset, c.data) for c in chunks if c is not None] == expected
    assert cursor.shipped() == {
        "stdout": max(6, offsets.get("stdout", 0)),
        "stderr": max(2, offsets.get("stderr", 0)),
    }


@given(frames=frames_strategy, cut=st.integers(min_value=0, max_value=400))
def test_resuming_from_any_offsets_gives_each_byte_once(
    frames: list[tuple[str, bytes]], cut: int
) -> None:
    first = LogCursor({})
    shipped: list[LogChunk] = []
    for stream, data in frames[: cut % (len(frames) + 1)]:
        chunk = first.chunk(stream, data)  # type: ignore[arg-type]
        assert chunk is not None
        shipped.append(chunk)
    second = LogCursor(first.shipped())  # a restarted worker reads from the start again
    for stream, data in frames:
        chunk = second.chunk(stream, data)  # type: ignore[arg-type]
        if chunk is not None:
            shipped.append(chunk)
    for stream in ("stdout", "stderr"):
        whole = b"".join(d for s, d in frames if s == stream)
        got = sorted((c.offset, c.data) for c in shipped if c.stream == stream)
        assert b"".join(d for _, d in got) == whole
        assert [o for o, _ in got] == sorted({o for o, _ in got})  # no offset twice


def downloading(layer: str, current: int, total: int) -> dict[str, Any]:
    return {
        "status": "Downloading",
        "id": layer,
        "progressDetail": {"current": current, "total": total},
    }


def test_pull_progress_reports_each_new_tenth_and_finished_layers() -> None:
    progress = PullProgress("reg/app:1")
    events = [
        {"status": "Already exists", "id": "base", "progressDetail": {}},
        {"status": "Pulling fs layer", "id": "a", "progressDetail": {}},
        {"status": "Pulling fs layer", "id": "b", "progressDetail": {}},
        downloading("a", 10, 100),
        downloading("b", 0, 100),
        downloading("a", 50, 100),
        downloading("a", 55, 100),
        downloading("b", 100, 100),
        {"status": "Download complete", "id": "a", "progressDetail": {}},
        {"status": "Download complete", "id": "a", "progressDetail": {}},
        {"status": "Download complete", "id": "b", "progressDetail": {}},
        {"status": "Digest: sha256:abc"},
    ]
    lines = [line for line in map(progress.update, events) if line]
    assert lines == [
        "pulling reg/app:1: 1 layer done",
        "pulling reg/app:1: 10%",  # of the bytes known so far; b adds 100 more
        "pulling reg/app:1: 20%",
        "pulling reg/app:1: 70%",
        "pulling reg/app:1: 2 layers done",
        "pulling reg/app:1: 3 layers done",
    ]


@pytest.mark.parametrize(
    ("event", "error"),
    [
        pytest.param({"error": "manifest unknown"}, "manifest unknown", id="error"),
        pytest.param({"errorDetail": {"message": "denied"}}, "denied", id="detail-only"),
        pytest.param({"status": "Pulling fs layer", "id": "a"}, None, id="no-error"),
    ],
)
def test_pull_errors(event: dict[str, Any], error: str | None) -> None:
    assert PullProgress.error(event) == error


@pytest.mark.parametrize(
    ("image", "detail", "message"),
    [
        pytest.param(
            "alpine:3.20",
            "initializing source docker://alpine:3.20: pinging container registry "
            'registry-1.docker.io: Get "https://registry-1.docker.io/v2/": dial tcp: '
            "lookup registry-1.docker.io: no such host",
            "registry unreachable: docker.io (pulling alpine:3.20)",
            id="no-network-dns",
        ),
        pytest.param(
            "ghcr.io/acme/app:1",
            'pinging container registry ghcr.io: Get "https://ghcr.io/v2/": dial tcp '
            "140.82.121.34:443: connect: network is unreachable",
            "registry unreachable: ghcr.io (pulling ghcr.io/acme/app:1)",
            id="no-route",
        ),
        pytest.param(
            "localhost:5000/app:1",
            'Get "https://localhost:5000/v2/": dial tcp [::1]:5000: connect: connection refused',
            "registry unreachable: localhost:5000 (pulling localhost:5000/app:1)",
            id="refused",
        ),
        pytest.param(
            "reg.example/app:1",
            "reading manifest 1 in reg.example/app: manifest unknown",
            "image not found: reg.example/app:1",
            id="reachable-but-missing",
        ),
        pytest.param(
            "reg.example/app:1",
            "requested access to the resource is denied",
            "image not found: reg.example/app:1",
            id="denied",
        ),
    ],
)
def test_a_pull_failure_says_whether_the_registry_could_be_reached(
    image: str, detail: str, message: str
) -> None:
    failure = pull_failure(image, detail)
    assert isinstance(failure, ImageNotFound)  # final either way: never retried
    assert str(failure).startswith(message)
    assert detail in str(failure)
