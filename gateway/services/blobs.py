"""Content-addressed blobs (working-directory tars) on the gateway's storage root.

::

    PUT /v1/blobs/sha256:<hex> ─▶ tmp/<random> (hashed while written, size-capped)
                               ─▶ digest matches? ─▶ rename to sha256/<hex> (atomic)
    HEAD ─▶ exists?  (and its mtime is refreshed: a blob about to be used is not collected)
    GET  ─▶ nodes, with their node token
    gc   ─▶ delete blobs no live session names and older than the grace period

A blob becomes visible only after the server computed its sha256 and found it equal to
the name: a client's digest is never trusted. Layout under ``STORAGE_ROOT/blobs``:
``sha256/<hex>`` for blobs, ``tmp/`` for uploads in flight (same filesystem, so the
rename is atomic).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from contract.blobs import is_digest
from gateway.db.engine import SessionFactory
from gateway.db.models import JobTemplate, Session
from gateway.domain.errors import Invalid
from gateway.domain.status import TERMINAL

__all__ = [
    "BlobStore",
    "BlobTooLarge",
    "StoredBlob",
    "collect_garbage",
    "collectable",
]

log = logging.getLogger(__name__)
#: an upload in tmp/ not written to for this long was abandoned (whatever the GC grace)
STALLED_UPLOAD_S = 3600.0


class BlobTooLarge(Invalid):
    status = 413
    title = "Payload too large"


@dataclass(frozen=True, slots=True)
class StoredBlob:
    digest: str
    size: int
    mtime: float  # epoch seconds: written, or last asked about


def collectable(
    blobs: Iterable[StoredBlob], referenced: set[str], now: float, grace_s: float
) -> list[str]:
    """The blobs garbage collection deletes: named by no live session, older than grace."""
    return sorted(b.digest for b in blobs if b.digest not in referenced and now - b.mtime > grace_s)


class BlobStore:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root / "blobs"
        self.max_bytes = max_bytes
        self.uploads = 0  # blobs this process stored (a counter for tests and metrics)

    def path(self, digest: str) -> Path:
        if not is_digest(digest):
            raise Invalid(f"not a blob digest: {digest!r} (want sha256:<64 hex>)", field="digest")
        return self.root / "sha256" / digest.removeprefix("sha256:")

    def exists(self, digest: str, *, touch: bool = False) -> bool:
        path = self.path(digest)
        try:
            if touch:
                os.utime(path)
            else:
                path.stat()
        except FileNotFoundError:
            return False
        return True

    async def put(self, digest: str, chunks: AsyncIterator[bytes]) -> bool:
        """Store *chunks* as *digest*; False if it was already there. Verifies the sha256."""
        final = self.path(digest)
        if self.exists(digest, touch=True):
            async for _ in chunks:  # drain: the client sent it anyway
                pass
            return False
        tmp_dir = self.root / "tmp"
        await asyncio.to_thread(tmp_dir.mkdir, parents=True, exist_ok=True)
        tmp = tmp_dir / uuid.uuid4().hex
        sha = hashlib.sha256()
        size = 0
        try:
            with tmp.open("wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise BlobTooLarge(
                            f"the blob is over {self.max_bytes} bytes (JOBGATE_MAX_BLOB_BYTES)"
                        )
                    sha.update(chunk)
                    await asyncio.to_thread(out.write, chunk)
                await asyncio.to_thread(os.fsync, out.fileno())
            actual = f"sha256:{sha.hexdigest()}"
            if actual != digest:
                raise Invalid(
                    f"the body's digest is {actual}, not {digest}: the upload was damaged "
                    "or named wrongly; nothing was stored",
                    field="digest",
                )
            await asyncio.to_thread(final.parent.mkdir, parents=True, exist_ok=True)
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        self.uploads += 1
        return True

    def list(self) -> list[StoredBlob]:
        found = []
        folder = self.root / "sha256"
        if not folder.is_dir():
            return []
        for entry in os.scandir(folder):
            digest = f"sha256:{entry.name}"
            if not is_digest(digest):
                continue
            info = entry.stat()
            found.append(StoredBlob(digest, info.st_size, info.st_mtime))
        return found

    def remove_stale_uploads(self, now: float, idle_s: float) -> int:
        """Uploads not written to for *idle_s*: their client or gateway went away."""
        removed = 0
        folder = self.root / "tmp"
        if folder.is_dir():
            for entry in os.scandir(folder):
                if now - entry.stat().st_mtime > idle_s:
                    Path(entry.path).unlink(missing_ok=True)
                    removed += 1
        return removed


async def referenced_digests(db: SessionFactory) -> set[str]:
    async with db() as session:
        rows = await session.execute(
            select(Session.working_dir)
            .where(Session.working_dir.is_not(None), Session.status.not_in(TERMINAL))
            .distinct()
        )
        found = {digest for (digest,) in rows if digest}
        # a template's working directory is used by every run to come (docs/pipelines.md)
        for (spec,) in await session.execute(select(JobTemplate.spec)):
            if isinstance(spec.get("working_dir"), str):
                found.add(spec["working_dir"])
        return found


async def collect_garbage(
    store: BlobStore, db: SessionFactory, grace_s: float, now: float | None = None
) -> list[str]:
    """Delete unreferenced blobs older than *grace_s*; returns the digests deleted.

    The blob list is read before the database, so a blob uploaded and submitted between
    the two reads is younger than the grace period and survives.
    """
    blobs = store.list()
    referenced = await referenced_digests(db)
    when = time.time() if now is None else now
    doomed = collectable(blobs, referenced, when, grace_s)
    deleted = []
    for digest in doomed:
        path = store.path(digest)
        try:  # asked about (HEAD, a submit) since it was listed: keep it
            if when - path.stat().st_mtime <= grace_s:
                continue
        except FileNotFoundError:
            continue
        path.unlink(missing_ok=True)
        deleted.append(digest)
    store.remove_stale_uploads(when, max(grace_s, STALLED_UPLOAD_S))
    return deleted
