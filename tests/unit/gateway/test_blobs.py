"""The gateway's blob store: a blob is visible only once its sha256 matched its name, and
garbage collection keeps what a live session names and what was just uploaded."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from gateway_rows import Rows

from gateway.db.engine import SessionFactory
from gateway.domain.errors import Invalid
from gateway.domain.status import SessionStatus
from gateway.services.blobs import (
    BlobStore,
    BlobTooLarge,
    StoredBlob,
    collect_garbage,
    collectable,
)

S = SessionStatus
HOUR = 3600.0


def digest_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


async def chunks(data: bytes, size: int = 7) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def age(store: BlobStore, digest: str, seconds: float) -> None:
    when = time.time() - seconds
    os.utime(store.path(digest), (when, when))


async def test_put_verifies_the_digest_and_stores_once(tmp_path: Path) -> None:
    store = BlobStore(tmp_path, max_bytes=1024)
    data = b"a working tree" * 10
    digest = digest_of(data)
    assert await store.put(digest, chunks(data)) is True
    assert store.path(digest).read_bytes() == data
    assert await store.put(digest, chunks(data)) is False  # already there: not rewritten
    assert store.uploads == 1
    assert store.exists(digest)


async def test_a_body_that_is_not_its_name_is_refused_and_never_visible(tmp_path: Path) -> None:
    store = BlobStore(tmp_path, max_bytes=1024)
    claimed = digest_of(b"what the client said")
    with pytest.raises(Invalid, match=f"the body's digest is sha256:.*, not {claimed}"):
        await store.put(claimed, chunks(b"what the client sent"))
    assert not store.exists(claimed)
    assert list((tmp_path / "blobs" / "tmp").iterdir()) == []
    assert store.uploads == 0


async def test_over_the_limit_is_413_and_leaves_nothing(tmp_path: Path) -> None:
    store = BlobStore(tmp_path, max_bytes=10)
    data = b"x" * 11
    with pytest.raises(BlobTooLarge, match="over 10 bytes") as caught:
        await store.put(digest_of(data), chunks(data))
    assert caught.value.status == 413
    assert not store.exists(digest_of(data))
    assert list((tmp_path / "blobs" / "tmp").iterdir()) == []


def test_not_a_digest_is_invalid(tmp_path: Path) -> None:
    store = BlobStore(tmp_path, max_bytes=10)
    for bad in ("sha256:../../etc/passwd", "md5:abc", "sha256:" + "A" * 64):
        with pytest.raises(Invalid, match="not a blob digest"):
            store.path(bad)


@pytest.mark.parametrize(
    ("referenced", "age_s", "collected"),
    [
        (False, 2 * HOUR, True),  # unreferenced and old: deleted
        (False, 60.0, False),  # unreferenced but young: an upload racing its submit
        (True, 2 * HOUR, False),  # a live session names it
        (True, 60.0, False),
    ],
)
def test_gc_decisions(referenced: bool, age_s: float, collected: bool) -> None:
    now = 1_000_000.0
    blob = StoredBlob("sha256:" + "a" * 64, 10, now - age_s)
    refs = {blob.digest} if referenced else set()
    assert collectable([blob], refs, now, grace_s=HOUR) == ([blob.digest] if collected else [])


async def test_gc_keeps_what_live_sessions_name(
    tmp_path: Path, db: SessionFactory, rows: Rows
) -> None:
    store = BlobStore(tmp_path, max_bytes=1024)
    names = {}
    for label in ("pending", "running", "ended", "orphan", "fresh"):
        data = label.encode()
        names[label] = digest_of(data)
        await store.put(names[label], chunks(data))
        if label != "fresh":
            age(store, names[label], 2 * HOUR)
    await rows.session(S.PENDING, [], session_id="s1", working_dir=names["pending"])
    await rows.session(S.RUNNING, [], session_id="s2", working_dir=names["running"])
    await rows.session(S.SUCCEEDED, [], session_id="s3", working_dir=names["ended"])
    deleted = await collect_garbage(store, db, grace_s=HOUR)
    assert sorted(deleted) == sorted([names["ended"], names["orphan"]])
    kept = {b.digest for b in store.list()}
    assert kept == {names["pending"], names["running"], names["fresh"]}


async def test_gc_spares_a_blob_asked_about_after_it_was_listed(
    tmp_path: Path, db: SessionFactory
) -> None:
    store = BlobStore(tmp_path, max_bytes=1024)
    digest = digest_of(b"tree")
    await store.put(digest, chunks(b"tree"))
    age(store, digest, 2 * HOUR)
    assert store.exists(digest, touch=True)  # HEAD (or a submit) refreshes it
    assert await collect_garbage(store, db, grace_s=HOUR) == []
    assert store.exists(digest)


async def test_gc_removes_abandoned_uploads_but_not_ones_in_flight(
    tmp_path: Path, db: SessionFactory
) -> None:
    store = BlobStore(tmp_path, max_bytes=1024)
    uploads = tmp_path / "blobs" / "tmp"
    uploads.mkdir(parents=True)
    (uploads / "abandoned").write_bytes(b"half")
    (uploads / "in-flight").write_bytes(b"half")
    old = time.time() - 2 * HOUR
    os.utime(uploads / "abandoned", (old, old))
    await collect_garbage(store, db, grace_s=0.0)  # even with no grace for blobs
    assert sorted(p.name for p in uploads.iterdir()) == ["in-flight"]
