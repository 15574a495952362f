"""Files to and from data folders: resumable uploads (tus 1.0) and ranged downloads.

::

    put  file ─▶ POST /v1/folders/F/uploads (Upload-Length, path) ─▶ Location
              ─▶ PATCH Location (Upload-Offset: 0, 1 MiB chunks from disk)
                   connection lost? HEAD Location ─▶ Upload-Offset ─▶ PATCH from there
    get  file ─▶ GET /v1/folders/F/files/PATH ─▶ LOCAL.part
                   connection lost? GET with Range: bytes=<have>- ─▶ append
              ─▶ rename LOCAL.part to LOCAL

Nothing is held in memory beyond one chunk; both directions resume after a dropped
connection (a few attempts) without sending again what arrived.
"""

from __future__ import annotations

import base64
import os
import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from jobgate.client import ApiError, Client, _raise_for, segment, segments

__all__ = ["Item", "download", "plan_upload", "upload"]

CHUNK = 1024 * 1024
ATTEMPTS = 5
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


def upload(api: Client, folder: str, item: Item, advance: Advance) -> None:
    """Send one file; a dropped connection resumes at the offset the gateway holds."""
    metadata = "path " + base64.b64encode(item.remote.encode()).decode()
    created = api.http.post(
        f"/v1/folders/{segment(folder)}/uploads",
        headers={
            "Tus-Resumable": "1.0.0",
            "Upload-Length": str(item.size),
            "Upload-Metadata": metadata,
        },
    )
    _raise_for(created)
    location = created.headers["Location"]
    shown = 0  # bytes the progress bar counts for this file

    def bump(n: int) -> None:
        nonlocal shown
        shown += n
        advance(n)

    offset = 0
    for attempt in range(ATTEMPTS):
        if offset >= item.size:
            return
        try:
            response = api.http.patch(
                location,
                content=_chunks(item.local, offset, bump),
                headers={
                    "Tus-Resumable": "1.0.0",
                    "Upload-Offset": str(offset),
                    "Content-Type": "application/offset+octet-stream",
                    "Content-Length": str(item.size - offset),
                },
                timeout=httpx.Timeout(60.0, write=None, read=None),
            )
            _raise_for(response)
            offset = int(response.headers["Upload-Offset"])
        except httpx.TransportError:
            if attempt == ATTEMPTS - 1:
                raise
            head = api.http.head(location, headers={"Tus-Resumable": "1.0.0"})
            _raise_for(head)
            offset = int(head.headers["Upload-Offset"])
        bump(offset - shown)  # the bar shows what the gateway holds


def download(api: Client, folder: str, remote: str, local: Path, advance: Advance) -> None:
    """Fetch one file to *local* (through ``local.part``, resumed with a Range)."""
    part = local.with_name(local.name + ".part")
    part.unlink(missing_ok=True)
    url = f"/v1/folders/{segment(folder)}/files/{segments(remote)}"
    for attempt in range(ATTEMPTS):
        have = part.stat().st_size if part.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        try:
            with api.http.stream(
                "GET", url, headers=headers, timeout=httpx.Timeout(60.0, read=None)
            ) as response:
                if response.status_code == 416 and have:
                    break  # everything arrived before the connection dropped
                if response.status_code >= 400:
                    response.read()
                    _raise_for(response)
                mode = "ab" if response.status_code == 206 else "wb"
                with part.open(mode) as out:
                    for chunk in response.iter_bytes(CHUNK):
                        out.write(chunk)
                        advance(len(chunk))
            break
        except httpx.TransportError:
            if attempt == ATTEMPTS - 1:
                raise
    os.replace(part, local)
