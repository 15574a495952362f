"""A session's working directory on this node: fetch the tar once, give each kernel a copy.

::

    StartKernel.working_dir = "sha256:<hex>"
      ─▶ cache/sha256/<hex>   GET /v1/blobs/{digest} (node token) ─▶ tmp ─▶ sha256 ok? ─▶ rename
      ─▶ kernels/<kernel_id>/  a fresh, safe extraction: the job runs (and writes) here
      ─▶ removed with the kernel

The cache holds the verified *tar*, never an unpacked tree, so nothing a job writes can
reach it: every kernel unpacks its own copy (a copy costs one extraction of at most
``max_working_dir`` bytes; an overlay mount would need privileges a rootless node lacks).
Starts of the same digest share one download (a lock per digest); the digest is checked
again here, so a damaged transfer or a lying server never becomes a working directory.
The cache keeps at most ``workdir_cache_bytes``: after each download the least recently
used tars go (never one a start is unpacking).

Extraction refuses anything that could write outside the kernel's directory or create
something other than plain files, directories and in-tree symbolic links: absolute
names, ``..``, links leaving the tree, hard links, device files and fifos — first with
our own checks (clear messages), then again through ``tarfile``'s ``data`` filter.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import posixpath
import shutil
import tarfile
import uuid
from pathlib import Path

import httpx

from contract.blobs import blob_path, is_digest
from plugins.runtimes.base import RuntimeFailure

__all__ = ["BlobClient", "UnsafeArchive", "WorkdirCache", "safe_extract"]

CHUNK = 1024 * 1024
DEFAULT_CACHE_BYTES = 10 * 1024**3


class UnsafeArchive(RuntimeFailure):
    """The tar holds something that must not be unpacked."""


class BlobClient:
    """Downloads blobs from the gateway with the node's own credential."""

    def __init__(self, gateway_url: str, credential: str) -> None:
        self.http = httpx.AsyncClient(
            base_url=gateway_url,
            headers={"Authorization": f"Bearer {credential}"},
            timeout=httpx.Timeout(60.0, connect=5.0),
        )
        self.downloads = 0

    async def download(self, digest: str, target: Path) -> str:
        """Write the blob to *target*; return the sha256 of what arrived."""
        sha = hashlib.sha256()
        async with self.http.stream("GET", blob_path(digest)) as response:
            if response.status_code == 404:
                raise RuntimeFailure(f"the gateway has no working directory {digest}")
            if response.status_code >= 400:
                await response.aread()
                raise RuntimeFailure(
                    f"fetching working directory {digest}: HTTP {response.status_code}"
                )
            with target.open("wb") as out:
                async for chunk in response.aiter_bytes(CHUNK):
                    sha.update(chunk)
                    await asyncio.to_thread(out.write, chunk)
        self.downloads += 1
        return f"sha256:{sha.hexdigest()}"

    async def close(self) -> None:
        await self.http.aclose()


class WorkdirCache:
    def __init__(
        self, root: Path, client: BlobClient, max_cache_bytes: int = DEFAULT_CACHE_BYTES
    ) -> None:
        self.root = root
        self.client = client
        self.max_cache_bytes = max_cache_bytes
        self._locks: dict[str, asyncio.Lock] = {}
        self._busy: dict[str, int] = {}  # digest -> checkouts using its tar right now
        self._used: dict[str, int] = {}  # digest -> when this process last used it (a count)
        self._clock = 0

    def blob(self, digest: str) -> Path:
        return self.root / "cache" / "sha256" / digest.removeprefix("sha256:")

    def kernel_dir(self, kernel_id: str) -> Path:
        return self.root / "kernels" / kernel_id

    async def fetch(self, digest: str) -> Path:
        """The verified tar for *digest*, downloaded at most once however many ask."""
        if not is_digest(digest):
            raise RuntimeFailure(f"not a blob digest: {digest!r}")
        final = self.blob(digest)
        lock = self._locks.setdefault(digest, asyncio.Lock())
        self._clock += 1
        self._used[digest] = self._clock  # recently used: pruned last
        async with lock:
            if final.is_file():
                return final
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = final.parent / f".{uuid.uuid4().hex}.part"
            try:
                try:
                    actual = await self.client.download(digest, tmp)
                except httpx.HTTPError as exc:
                    raise RuntimeFailure(
                        f"cannot fetch working directory {digest}: {exc}"
                    ) from None
                if actual != digest:
                    raise RuntimeFailure(
                        f"working directory {digest} arrived damaged (its sha256 is {actual})"
                    )
                os.replace(tmp, final)
            finally:
                tmp.unlink(missing_ok=True)
        await asyncio.to_thread(self.prune, digest)
        return final

    def prune(self, keep: str = "") -> list[str]:
        """Delete the least recently used tars while the cache is over its size.

        Never the one just fetched (*keep*) nor one a checkout is unpacking. Returns the
        digests removed; a later start of one of them downloads it again.
        """
        folder = self.root / "cache" / "sha256"
        entries = []
        for entry in os.scandir(folder):
            if entry.name.startswith("."):
                continue
            info = entry.stat()
            digest = f"sha256:{entry.name}"
            # tars from before this process started first (oldest file first), then by use
            entries.append(((self._used.get(digest, 0), info.st_mtime), digest, info.st_size))
        total = sum(size for _, _, size in entries)
        removed = []
        for _, digest, size in sorted(entries):
            if total <= self.max_cache_bytes:
                break
            if digest == keep or self._busy.get(digest):
                continue
            self.blob(digest).unlink(missing_ok=True)
            total -= size
            removed.append(digest)
        return removed

    async def checkout(self, digest: str, kernel_id: str) -> Path:
        """A fresh copy of the tree for one kernel (replacing a half-made earlier one)."""
        self._busy[digest] = self._busy.get(digest, 0) + 1
        try:
            tar_path = await self.fetch(digest)
            target = self.kernel_dir(kernel_id)
            await asyncio.to_thread(_fresh_extract, tar_path, target)
        finally:
            self._busy[digest] -= 1
            if not self._busy[digest]:
                del self._busy[digest]
        return target

    def release_now(self, kernel_id: str) -> None:
        """Remove a kernel's copy (its container is gone; what it wrote goes with it)."""
        shutil.rmtree(self.kernel_dir(kernel_id), ignore_errors=True)

    async def close(self) -> None:
        await self.client.close()


def _fresh_extract(tar_path: Path, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}"
    try:
        safe_extract(tar_path, tmp)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_member(member: tarfile.TarInfo) -> None:
    name = member.name
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or ".." in parts or "\x00" in name:
        raise UnsafeArchive(f"the working directory holds an unsafe path: {name!r}")
    if member.isdev() or member.isfifo():
        raise UnsafeArchive(f"the working directory holds a device or fifo: {name!r}")
    if member.islnk():
        raise UnsafeArchive(f"the working directory holds a hard link: {name!r}")
    if member.issym():
        link = member.linkname
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), link))
        if link.startswith("/") or resolved == ".." or resolved.startswith("../"):
            raise UnsafeArchive(
                f"the working directory holds a link leaving it: {name!r} -> {link!r}"
            )
    elif not (member.isfile() or member.isdir()):
        raise UnsafeArchive(f"the working directory holds an unsupported entry: {name!r}")


def safe_extract(tar_path: Path, target: Path) -> None:
    """Unpack *tar_path* into the new directory *target*, refusing anything unsafe."""
    target.mkdir(parents=True)
    real_root = target.resolve()
    with tarfile.open(tar_path, mode="r:") as tar:
        members = tar.getmembers()
        for member in members:
            _check_member(member)
        for member in members:
            # a member must not be written through a symlink made by an earlier one
            parent = (real_root / member.name).parent.resolve()
            if not parent.is_relative_to(real_root):
                raise UnsafeArchive(f"the working directory writes through a link: {member.name!r}")
            try:
                tar.extract(member, real_root, filter="data")
            except (tarfile.FilterError, OSError) as exc:
                raise UnsafeArchive(f"cannot unpack {member.name!r}: {exc}") from None


def workdir_root(configured: Path | None, state_dir: Path, runtime: str, instance: str) -> Path:
    """Where this worker keeps working directories.

    ``JOBGATE_WORKDIR_ROOT`` when set, else ``state_dir/workdirs``, except for a worker
    running as root beside another user's rootless Podman (``jobgate up`` as root, CI):
    that user must traverse to the copies it bind-mounts, and a data directory is 0700.
    Then ``/var/tmp/jobgate-workdirs-<instance>``: the root 0711 (traversable, not
    listable), the tar cache 0700 (root only), each copy handed to the Podman user.
    """
    if configured is not None:
        return configured
    default = state_dir / "workdirs"
    if runtime != "podman" or os.geteuid() != 0 or _podman_socket_owner() in (None, 0):
        return default
    root = Path("/var/tmp") / f"jobgate-workdirs-{instance}"
    for path, mode in ((root, 0o711), (root / "kernels", 0o711), (root / "cache", 0o700)):
        path.mkdir(mode=mode, parents=True, exist_ok=True)
        path.chmod(mode)
    return root


def _podman_socket_owner() -> int | None:
    from plugins.runtimes.podman.settings import PodmanSettings

    socket = PodmanSettings().socket
    if not socket.startswith("unix://"):
        return None
    try:
        return os.stat(socket.removeprefix("unix://")).st_uid
    except OSError:
        return None
