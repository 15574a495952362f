"""Pack a working directory for ``jobgate run --working-dir DIR``.

::

    DIR ─ walk (sorted) ─ skip .git/, .gitignore and .jobgateignore matches ─ size cap
        ─ tar (fixed mtime/uid/gid/mode) ─ sha256 ─▶ PUT /v1/blobs/sha256:<hex> (if absent)

The same tree gives the same bytes and so the same digest: entries are sorted, every
mtime is 0, owners are 0/0 with no names, modes are 0755 (directories, executables) or
0644. The gateway stores the tar once by digest, so running the same tree again uploads
nothing.

Ignore rules follow git's own semantics through ``pathspec``'s ``GitIgnoreSpec`` (the
same last-match-wins, negation, directory-only and anchoring rules as git): a
``.gitignore`` in any directory applies below it, deeper files win over higher ones,
and ``.jobgateignore`` (same syntax) in any directory wins over ``.gitignore`` there.
An ignored directory is not entered (as in git, a file inside it cannot be re-included).
Symbolic links are kept when they point inside DIR and refused otherwise.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import httpx
from pathspec import GitIgnoreSpec

from contract.blobs import blob_path
from jobgate.client import ApiError, Client
from jobgate.render import err

__all__ = [
    "DEFAULT_MAX_BYTES",
    "IGNORE_FILES",
    "Packed",
    "Sent",
    "WorkdirError",
    "format_size",
    "max_bytes_from_env",
    "pack",
    "scan",
    "upload",
]

DEFAULT_MAX_BYTES = 100 * 1024 * 1024
IGNORE_FILES = (".gitignore", ".jobgateignore")  # later files win
ALWAYS_SKIPPED = frozenset({".git"})


class WorkdirError(Exception):
    """The directory cannot be packed; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Entry:
    rel: str  # posix path relative to the root
    path: Path
    kind: str  # "file" | "dir" | "symlink"
    size: int = 0
    executable: bool = False
    link: str = ""


@dataclass(frozen=True, slots=True)
class Packed:
    """A packed tree: the tar file on disk, its digest and what went in."""

    path: Path
    digest: str  # "sha256:<hex>"
    size: int  # bytes of the tar
    content_bytes: int  # bytes of file content in it
    files: int

    def close(self) -> None:
        self.path.unlink(missing_ok=True)


def format_size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def _specs_in(directory: Path) -> list[GitIgnoreSpec]:
    specs = []
    for name in IGNORE_FILES:
        file = directory / name
        if file.is_file():
            specs.append(GitIgnoreSpec.from_lines(file.read_text(errors="replace").splitlines()))
    return specs


def _ignored(specs: list[tuple[str, GitIgnoreSpec]], rel: str, is_dir: bool) -> bool:
    """Git's rule: the last spec (deepest, then .jobgateignore) with a matching pattern decides."""
    decision = False
    for base, spec in specs:
        below = rel[len(base) + 1 :] if base else rel
        result = spec.check_file(below + "/" if is_dir else below)
        if result.include is not None:
            decision = result.include
    return decision


def scan(root: Path) -> list[Entry]:
    """Every entry to pack under *root*, sorted, after the ignore rules."""
    root = root.resolve()
    if not root.is_dir():
        raise WorkdirError(f"--working-dir {root} is not a directory")
    entries: list[Entry] = []

    def walk(directory: Path, rel: str, specs: list[tuple[str, GitIgnoreSpec]]) -> None:
        specs = specs + [(rel, spec) for spec in _specs_in(directory)]
        try:
            children = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            raise WorkdirError(f"cannot read {directory}: {exc.strerror}") from None
        for child in children:
            child_rel = f"{rel}/{child.name}" if rel else child.name
            if child.name in ALWAYS_SKIPPED:
                continue
            info = child.stat(follow_symlinks=False)
            is_dir = stat.S_ISDIR(info.st_mode)
            if _ignored(specs, child_rel, is_dir):
                continue
            path = Path(child.path)
            if stat.S_ISLNK(info.st_mode):
                entries.append(_link(root, path, child_rel))
            elif is_dir:
                entries.append(Entry(child_rel, path, "dir"))
                walk(path, child_rel, specs)
            elif stat.S_ISREG(info.st_mode):
                executable = bool(info.st_mode & 0o111)
                entries.append(Entry(child_rel, path, "file", info.st_size, executable))
            # sockets, fifos and devices are never packed

    walk(root, "", [])
    return entries


def _link(root: Path, path: Path, rel: str) -> Entry:
    target = os.readlink(path)
    resolved = (path.parent / target).resolve()
    if os.path.isabs(target) or not resolved.is_relative_to(root):
        raise WorkdirError(
            f"{rel} is a symbolic link to {target}, outside the working directory; "
            "add it to .jobgateignore or copy what it points to"
        )
    return Entry(rel, path, "symlink", link=target)


def _too_big(entries: list[Entry], total: int, limit: int) -> WorkdirError:
    tops: dict[str, int] = {}
    for e in entries:
        top = e.rel.split("/", 1)[0] + ("/" if "/" in e.rel else "")
        tops[top] = tops.get(top, 0) + e.size
    biggest = sorted(tops.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    listing = ", ".join(f"{name} {format_size(size)}" for name, size in biggest)
    return WorkdirError(
        f"the working directory holds {format_size(total)} of files, over the "
        f"{format_size(limit)} limit (JOBGATE_MAX_WORKING_DIR_BYTES); biggest: {listing}. "
        "Leave data out with .jobgateignore or .gitignore and mount or fetch it instead"
    )


def _tarinfo(entry: Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(str(PurePosixPath(entry.rel)))
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if entry.kind == "dir":
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif entry.kind == "symlink":
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, entry.link
    else:
        info.type, info.size = tarfile.REGTYPE, entry.size
        info.mode = 0o755 if entry.executable else 0o644
    return info


class _HashingWriter(io.RawIOBase):
    def __init__(self, target: io.BufferedWriter) -> None:
        self.target = target
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha.update(data)
        self.size += len(data)
        return self.target.write(data)


def _iter_open(entries: list[Entry]) -> Iterator[tuple[Entry, io.BufferedReader | None]]:
    for entry in entries:
        if entry.kind != "file":
            yield entry, None
            continue
        with entry.path.open("rb") as handle:
            yield entry, handle


def pack(root: Path, max_bytes: int = DEFAULT_MAX_BYTES, tmp_dir: Path | None = None) -> Packed:
    """Pack *root* into a deterministic tar in a temporary file; refuse trees over the cap."""
    entries = scan(root)
    total = sum(e.size for e in entries)
    if total > max_bytes:
        raise _too_big(entries, total, max_bytes)
    fd, name = tempfile.mkstemp(prefix="jobgate-workdir-", suffix=".tar", dir=tmp_dir)
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as raw:
            sink = _HashingWriter(raw)
            with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for entry, handle in _iter_open(entries):
                    info = _tarinfo(entry)
                    if handle is not None:
                        size = os.fstat(handle.fileno()).st_size
                        if size != entry.size:
                            raise WorkdirError(f"{entry.rel} changed while it was being packed")
                    tar.addfile(info, handle)
        files = sum(1 for e in entries if e.kind == "file")
        return Packed(path, f"sha256:{sink.sha.hexdigest()}", sink.size, total, files)
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def max_bytes_from_env() -> int:
    raw = os.environ.get("JOBGATE_MAX_WORKING_DIR_BYTES", "")
    return int(raw) if raw.strip().isdigit() else DEFAULT_MAX_BYTES


@dataclass(frozen=True, slots=True)
class Sent:
    digest: str
    uploaded: bool  # False: the gateway had it already
    files: int
    content_bytes: int


def upload(api: Client, root: Path, max_bytes: int | None = None) -> Sent:
    """Pack *root* and make sure the gateway holds it.

    Content-addressed: a HEAD first, and the PUT only when the gateway lacks the digest,
    so the same tree is sent once however often it runs.
    """
    try:
        packed = pack(root, max_bytes if max_bytes is not None else max_bytes_from_env())
    except WorkdirError as exc:
        raise ApiError(0, "Working directory", str(exc)) from None
    try:
        path = blob_path(packed.digest)
        try:
            api.request("HEAD", path)
            return Sent(packed.digest, False, packed.files, packed.content_bytes)
        except ApiError as exc:
            if exc.status != 404:
                raise
        with packed.path.open("rb") as body:
            api.request(
                "PUT",
                path,
                content=body,
                headers={"Content-Type": "application/octet-stream"},
                timeout=httpx.Timeout(30.0, write=300.0),
            )
        return Sent(packed.digest, True, packed.files, packed.content_bytes)
    finally:
        packed.close()


def send_working_dir(api: Client, root: Path) -> str:
    """``jobgate run --working-dir``: upload if needed, say what happened, return the digest."""
    sent = upload(api, root)
    what = "uploaded" if sent.uploaded else "already on the gateway, not uploaded"
    size = format_size(sent.content_bytes)
    err.print(
        f"[dim]jobgate: working dir {root}: {sent.files} files, {size}, "
        f"{sent.digest[:19]}… {what}[/]"
    )
    return sent.digest
