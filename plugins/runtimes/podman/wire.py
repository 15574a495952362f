"""Pure decoders for what Podman streams back: log frames, log offsets, pull progress;
and the one archive the runtime sends (a notice file).

Podman's logs endpoint multiplexes stdout and stderr the way Docker's does: each frame
is an 8-byte header ``[stream, 0, 0, 0, size as big-endian u32]`` followed by ``size``
bytes (stream 1 is stdout, 2 is stderr). The k8s-file log driver keeps partial lines, so
the bytes put back together are exactly the bytes the container wrote; per-stream byte
offsets are therefore stable across reads, which is what lets a restarted worker resume.
"""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Mapping
from typing import Any, Final

from plugins.runtimes.base import ImageNotFound, LogChunk, RegistryUnreachable, Stream

__all__ = [
    "FrameDecoder",
    "LogCursor",
    "PullProgress",
    "coalesce",
    "notice_tar",
    "pull_failure",
]

#: what Podman's (Go's) errors say when a registry cannot be reached at all, as opposed
#: to a registry that answered "no such image", "denied" or with a bad certificate
UNREACHABLE: Final = (
    "dial tcp",
    "no such host",
    "server misbehaving",
    "temporary failure in name resolution",
    "connection refused",
    "connection reset by peer",
    "network is unreachable",
    "no route to host",
    "i/o timeout",
    "tls handshake timeout",
    "client.timeout exceeded",
)
DEFAULT_REGISTRY: Final = "docker.io"


def registry_of(image: str) -> str:
    """The registry an image reference names (Docker's rule: a first component with a
    ``.`` or ``:``, or ``localhost``), else docker.io."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return DEFAULT_REGISTRY


def pull_failure(image: str, detail: str) -> ImageNotFound:
    """What a failed pull of *image* means, from Podman's error text: an unreachable
    registry, or an image that is not there (or not ours to pull)."""
    lowered = detail.lower()
    if any(phrase in lowered for phrase in UNREACHABLE):
        return RegistryUnreachable(image, registry_of(image), detail)
    return ImageNotFound(image, detail)


_STREAMS: Final[dict[int, Stream]] = {1: "stdout", 2: "stderr"}
_HEADER = 8
_DONE: Final = {"Download complete", "Already exists", "Pull complete"}


class FrameDecoder:
    """Feed raw bytes in any chunking, get whole ``(stream, payload)`` frames out."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[Stream, bytes]]:
        self._buffer += data
        frames: list[tuple[Stream, bytes]] = []
        while len(self._buffer) >= _HEADER:
            size = int.from_bytes(self._buffer[4:8], "big")
            if len(self._buffer) < _HEADER + size:
                break
            kind = self._buffer[0]
            payload = bytes(self._buffer[_HEADER : _HEADER + size])
            del self._buffer[: _HEADER + size]
            stream = _STREAMS.get(kind)
            if stream is not None and payload:  # stdin echo (0) or unknown kinds: dropped
                frames.append((stream, payload))
        return frames

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame still held."""
        return len(self._buffer)


def coalesce(frames: list[tuple[Stream, bytes]]) -> list[tuple[Stream, bytes]]:
    """Join neighbouring frames of the same stream (one chunk per burst, order kept)."""
    out: list[tuple[Stream, bytes]] = []
    for stream, data in frames:
        if out and out[-1][0] == stream:
            out[-1] = (stream, out[-1][1] + data)
        else:
            out.append((stream, data))
    return out


class LogCursor:
    """Counts bytes per stream from the start and drops those already shipped.

    ``offsets`` says how many bytes of each stream the worker has shipped already; a
    chunk that straddles the offset is cut, so nothing is sent twice and nothing lost.
    """

    def __init__(self, offsets: Mapping[str, int]) -> None:
        self._skip = {k: max(0, int(v)) for k, v in offsets.items()}
        self.position: dict[Stream, int] = {"stdout": 0, "stderr": 0}

    def shipped(self) -> dict[str, int]:
        """Offsets to resume from after this cursor: what it passed on or was told to skip."""
        return {s: max(self.position[s], self._skip.get(s, 0)) for s in self.position}

    def chunk(self, stream: Stream, data: bytes) -> LogChunk | None:
        start = self.position[stream]
        end = start + len(data)
        self.position[stream] = end
        skip_to = self._skip.get(stream, 0)
        if end <= skip_to:
            return None
        cut = max(0, skip_to - start)
        return LogChunk(stream, start + cut, data[cut:])


class PullProgress:
    """Docker-style pull events (``/images/create``) -> progress lines for PREPARING.

    Podman reports bytes (``Downloading``, current/total) about once a second per layer
    while a layer downloads; those give ``pulling IMAGE: 40%`` at each new tenth. A
    layer that arrives within the second reports only its start and end, so finished
    layers are counted too: ``pulling IMAGE: 2 layers done``.
    """

    def __init__(self, image: str, step: int = 10) -> None:
        self.image = image
        self._step = step
        self._layers: dict[str, list[int]] = {}  # id -> [current, total]
        self._done: set[str] = set()
        self._reported = -1

    @staticmethod
    def error(event: Mapping[str, Any]) -> str | None:
        """The failure an event reports, if any."""
        detail = event.get("errorDetail")
        message = event.get("error")
        if not message and isinstance(detail, dict):
            message = detail.get("message")
        return str(message) if message else None

    def update(self, event: Mapping[str, Any]) -> str | None:
        """Feed one event; returns a line when there is news worth a line."""
        layer = str(event.get("id") or "")
        status = str(event.get("status") or "")
        if not layer or not status:
            return None
        sizes = self._layers.setdefault(layer, [0, 0])
        detail = event.get("progressDetail")
        if status == "Downloading" and isinstance(detail, dict):
            sizes[1] = int(detail.get("total") or sizes[1])
            sizes[0] = int(detail.get("current") or 0)
            return self._percent()
        if status in _DONE and layer not in self._done:
            self._done.add(layer)
            sizes[0] = sizes[1]
            count = len(self._done)
            return f"pulling {self.image}: {count} layer{'s' if count > 1 else ''} done"
        return None

    def _percent(self) -> str | None:
        total = sum(t for _, t in self._layers.values() if t > 0)
        if total <= 0:
            return None
        done = sum(min(c, t) for c, t in self._layers.values() if t > 0)
        step = done * 100 // total // self._step * self._step
        if step <= self._reported:
            return None
        self._reported = step
        return f"pulling {self.image}: {step}%"


def notice_tar(name: str, text: str) -> bytes:
    """A tar of ``.jobgate/`` (0755) holding *name* (0644, *text*), for the archive API."""
    data = text.encode()
    out = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=out, mode="w") as tar:
        folder = tarfile.TarInfo(".jobgate")
        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, now
        tar.addfile(folder)
        item = tarfile.TarInfo(f".jobgate/{name}")
        item.size, item.mode, item.mtime = len(data), 0o644, now
        tar.addfile(item, io.BytesIO(data))
    return out.getvalue()
