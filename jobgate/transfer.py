"""Files to and from data folders: resumable uploads (tus 1.0) and ranged downloads.

::

    put  file ─▶ POST /v1/folders/F/uploads (Upload-Length, path) ─▶ Location
              ─▶ PATCH Location (Upload-Offset: 0, 8 MiB reads from disk)
                   connection lost? HEAD Location ─▶ Upload-Offset ─▶ PATCH from there
    get  file ─▶ GET /v1/folders/F/files/PATH ─▶ LOCAL.part   (splice: socket ─▶ file)
                   connection lost? GET with Range: bytes=<have>- ─▶ append
              ─▶ rename LOCAL.part to LOCAL

Nothing is held in memory beyond one chunk; both directions resume after a dropped
connection (a few attempts) without sending again what arrived. A download asks with
the standard library's ``http.client`` rather than httpx, whose per-64 KiB parsing cost
the client more CPU than the gateway's ``sendfile``, and moves the body from the socket
into the file inside the kernel (``splice`` through a pipe; over TLS, ``readinto`` 8 MiB
at a time); through a proxy (``HTTP(S)_PROXY``, ``ALL_PROXY``) it stays on httpx.

An upload also resumes across runs: its ``Location`` is remembered in a small file
(``~/.cache/jobgate/uploads/<key>.json``, mode 0600, keyed by the gateway, folder, remote
path and local file) together with the file's size and mtime. The next ``put`` of the
same, unchanged file asks ``HEAD`` for the offset and sends only the rest; a changed file
ends the stale upload (tus ``DELETE``) and starts again. The memo goes when the upload
completes.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import http.client
import json
import os
import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

import httpx
import platformdirs

from jobgate.client import ApiError, Client, _raise_for, segment, segments

__all__ = ["Item", "UploadMemo", "download", "plan_upload", "upload"]

CHUNK = 8 * 1024 * 1024
#: one splice of a download through its pipe (Linux's default cap for a pipe's size)
PIPE_SIZE = 1024 * 1024
ATTEMPTS = 5
TUS = {"Tus-Resumable": "1.0.0"}
Advance = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Item:
    local: Path
    remote: str
    size: int
    is_dir: bool = False


def _remote_join(base: str, name: str) -> str:
    return posixpath.join(base, name) if base else name


def plan_upload(sources: list[Path], remote: str) -> tuple[list[Item], list[Path]]:
    """What to send (files and empty directories) and the links skipped (never followed)."""
    items: list[Item] = []
    skipped: list[Path] = []
    base = remote.strip("/")
    for source in sources:
        if source.is_symlink():
            skipped.append(source)
            continue
        name = source.resolve().name
        if source.is_file():
            target = base if remote and not remote.endswith("/") and len(sources) == 1 else None
            items.append(Item(source, target or _remote_join(base, name), source.stat().st_size))
            continue
        if not source.is_dir():
            raise ApiError(0, "Usage", f"{source}: no such file or directory")
        top = _remote_join(base, name)
        items.append(Item(source, top, 0, is_dir=True))
        for dirpath, dirnames, filenames in os.walk(source):
            here = Path(dirpath)
            rel = here.relative_to(source).as_posix()
            prefix = top if rel == "." else f"{top}/{rel}"
            for d in sorted(dirnames):
                if (here / d).is_symlink():
                    skipped.append(here / d)
                else:
                    items.append(Item(here / d, f"{prefix}/{d}", 0, is_dir=True))
            for f in sorted(filenames):
                path = here / f
                if path.is_symlink() or not path.is_file():
                    skipped.append(path)
                else:
                    items.append(Item(path, f"{prefix}/{f}", path.stat().st_size))
    return items, skipped


def _chunks(path: Path, offset: int, advance: Advance) -> Iterator[bytes]:
    with path.open("rb") as f:
        f.seek(offset)
        while chunk := f.read(CHUNK):
            advance(len(chunk))
            yield chunk


@dataclass(frozen=True, slots=True)
class UploadMemo:
    """Where an unfinished upload of one local file to one remote path lives."""

    path: Path

    @classmethod
    def of(cls, api: Client, folder: str, item: Item) -> UploadMemo:
        key = json.dumps([api.profile.url, folder, item.remote, str(item.local.resolve())])
        name = hashlib.sha256(key.encode()).hexdigest()[:32] + ".json"
        return cls(Path(platformdirs.user_cache_dir("jobgate")) / "uploads" / name)

    def load(self) -> dict[str, object] | None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def save(self, location: str, size: int, mtime_ns: int) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"location": location, "size": size, "mtime_ns": mtime_ns}, f)
        tmp.replace(self.path)

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)


def _resume(api: Client, memo: UploadMemo, size: int, mtime_ns: int) -> tuple[str, int] | None:
    """The location and offset of this file's unfinished upload from an earlier run, if
    the gateway still holds it and the file did not change (else the stale one ends)."""
    known = memo.load()
    if known is None:
        return None
    location = str(known.get("location", ""))
    if not location.startswith("/v1/uploads/"):
        memo.forget()
        return None
    if known.get("size") != size or known.get("mtime_ns") != mtime_ns:
        api.http.delete(location, headers=TUS)  # the file changed: its part is useless
        memo.forget()
        return None
    head = api.http.head(location, headers=TUS)
    if head.status_code == 200 and head.headers.get("Upload-Length") == str(size):
        return location, int(head.headers["Upload-Offset"])
    memo.forget()  # finished, cleaned up after a day, or not ours: start again
    return None


def _offset(api: Client, location: str) -> int:
    head = api.http.head(location, headers=TUS)
    _raise_for(head)
    return int(head.headers["Upload-Offset"])


def upload(api: Client, folder: str, item: Item, advance: Advance) -> None:
    """Send one file; a dropped connection resumes at the offset the gateway holds, and
    so does the next run of the same upload after an interrupted one."""
    info = item.local.stat()
    memo = UploadMemo.of(api, folder, item)
    resumed = _resume(api, memo, item.size, info.st_mtime_ns) if item.size else None
    if resumed is None:
        metadata = "path " + base64.b64encode(item.remote.encode()).decode()
        created = api.http.post(
            f"/v1/folders/{segment(folder)}/uploads",
            headers={**TUS, "Upload-Length": str(item.size), "Upload-Metadata": metadata},
        )
        _raise_for(created)
        location, offset = created.headers["Location"], 0
        if item.size:
            memo.save(location, item.size, info.st_mtime_ns)
    else:
        location, offset = resumed
    shown = 0  # bytes the progress bar counts for this file

    def bump(n: int) -> None:
        nonlocal shown
        shown += n
        advance(n)

    bump(offset)
    for attempt in range(ATTEMPTS):
        if offset >= item.size:
            break
        try:
            response = api.http.patch(
                location,
                content=_chunks(item.local, offset, bump),
                headers={
                    **TUS,
                    "Upload-Offset": str(offset),
                    "Content-Type": "application/offset+octet-stream",
                    "Content-Length": str(item.size - offset),
                },
                timeout=httpx.Timeout(60.0, write=None, read=None),
            )
            if response.status_code != 409 or attempt == ATTEMPTS - 1:
                _raise_for(response)
                offset = int(response.headers["Upload-Offset"])
            else:  # not the offset the gateway holds (an earlier request was still writing)
                offset = _offset(api, location)
        except httpx.TransportError:
            if attempt == ATTEMPTS - 1:
                raise
            offset = _offset(api, location)
        bump(offset - shown)  # the bar shows what the gateway holds
    if offset < item.size:
        raise ApiError(
            0, "Incomplete", f"{item.local}: the gateway holds {offset} of {item.size} bytes"
        )
    memo.forget()


def _direct(api: Client) -> SplitResult | None:
    """The gateway's URL when a download can skip httpx: plain HTTP(S) with no proxy on
    the way (httpx would honour one; the standard library's connection does not).

    Whether a proxy is on the way is httpx's own answer for this client: the transport
    it picks for the URL is a proxy's when ``HTTP_PROXY``, ``HTTPS_PROXY`` or
    ``ALL_PROXY`` applies and ``NO_PROXY`` does not exempt the gateway."""
    url = urlsplit(api.profile.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        return None
    if api.http._transport_for_url(httpx.URL(api.profile.url)) is not api.http._transport:
        return None
    return url


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _splice_body(
    response: http.client.HTTPResponse, conn: http.client.HTTPConnection, fd: int, advance: Advance
) -> None:
    """Move a plain-HTTP body from the socket to *fd* inside the kernel (``splice``
    through a pipe: the socket's pages are handed on, then copied once into the file;
    ``readinto`` + ``write`` copy every byte twice through this process). First what
    http.client buffered past the headers, read as usual."""
    peeked = response.fp.peek(1)  # what the reader holds already (one read if none)
    head = response.read(min(len(peeked), response.length or 0))
    _write_all(fd, memoryview(head))
    advance(len(head))
    left = response.length or 0
    if not left or conn.sock is None:
        return
    sock = conn.sock.fileno()
    r, w = os.pipe()
    try:
        with contextlib.suppress(OSError):  # a bigger pipe, where the system allows it
            fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
        while left:
            moved = os.splice(sock, w, min(left, PIPE_SIZE))
            if not moved:
                break  # the connection closed early: the caller sees the length short
            left -= moved
            response.length = left
            pending = moved
            while pending:
                pending -= os.splice(r, fd, pending)
            advance(moved)
    finally:
        os.close(r)
        os.close(w)


def _fetch_direct(
    api: Client, base: SplitResult, path: str, part: Path, have: int, advance: Advance
) -> None:
    """GET *path* into *part* (from byte *have* on, with a Range) over one connection of
    the standard library's: 8 MiB ``readinto`` straight from the socket, then ``os.write``
    (httpx parses every 64 KiB in Python and copies each byte three more times: it cost
    the client 2-4 CPU seconds per GiB, more than the gateway's ``sendfile``). A lost
    connection is an ``httpx.ReadError``, as it would be through httpx."""
    conn: http.client.HTTPConnection
    if base.scheme == "https":
        context = httpx.create_ssl_context()
        conn = http.client.HTTPSConnection(base.hostname or "", base.port, context=context)
    else:
        conn = http.client.HTTPConnection(base.hostname or "", base.port)
    conn.timeout = 60.0  # to connect; then no read timeout, as for the httpx request
    headers = {"Accept-Encoding": "identity", "User-Agent": api.http.headers["User-Agent"]}
    if "Authorization" in api.http.headers:
        headers["Authorization"] = api.http.headers["Authorization"]
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        try:
            conn.request("GET", base.path.rstrip("/") + path, headers=headers)
            if conn.sock is not None:
                conn.sock.settimeout(None)
            response = conn.getresponse()
            if response.status == 416 and have:
                return  # everything arrived before the connection dropped
            if response.status >= 400 or response.status not in (200, 206):
                content = response.read()
                _raise_for(
                    httpx.Response(response.status, headers=response.getheaders(), content=content)
                )
                raise ApiError(response.status, "Unexpected", f"HTTP {response.status} for {path}")
            flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC  # no O_APPEND: splice refuses it
            flags |= 0 if response.status == 206 else os.O_TRUNC
            fd = os.open(part, flags, 0o666)
            try:
                os.lseek(fd, 0, os.SEEK_END)  # a 206 goes after what arrived
                if base.scheme == "http" and response.length and hasattr(os, "splice"):
                    _splice_body(response, conn, fd, advance)
                buffer = memoryview(bytearray(CHUNK))
                while n := response.readinto(buffer):  # what splice left, or all of it
                    _write_all(fd, buffer[:n])
                    advance(n)
            finally:
                os.close(fd)
            if response.length:  # http.client ends a short body quietly: it is not whole
                raise OSError(f"the connection closed {response.length} bytes early")
        except (OSError, http.client.HTTPException) as exc:
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()


def _fetch_httpx(api: Client, path: str, part: Path, have: int, advance: Advance) -> None:
    headers = {"Range": f"bytes={have}-"} if have else {}
    with api.http.stream(
        "GET", path, headers=headers, timeout=httpx.Timeout(60.0, read=None)
    ) as response:
        if response.status_code == 416 and have:
            return  # everything arrived before the connection dropped
        if response.status_code >= 400:
            response.read()
            _raise_for(response)
        mode = "ab" if response.status_code == 206 else "wb"
        encoded = "content-encoding" in response.headers
        pieces = response.iter_bytes() if encoded else response.iter_raw()
        with part.open(mode, buffering=CHUNK) as out:
            for chunk in pieces:  # as received: no re-chunking copies
                out.write(chunk)
                advance(len(chunk))


def download(api: Client, folder: str, remote: str, local: Path, advance: Advance) -> None:
    """Fetch one file to *local* (through ``local.part``, resumed with a Range)."""
    part = local.with_name(local.name + ".part")
    part.unlink(missing_ok=True)
    path = f"/v1/folders/{segment(folder)}/files/{segments(remote)}"
    direct = _direct(api)
    for attempt in range(ATTEMPTS):
        have = part.stat().st_size if part.exists() else 0
        try:
            if direct is not None:
                _fetch_direct(api, direct, path, part, have, advance)
            else:
                _fetch_httpx(api, path, part, have, advance)
            break
        except httpx.TransportError:
            if attempt == ATTEMPTS - 1:
                raise
    os.replace(part, local)
