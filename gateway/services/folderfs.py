"""Files inside data folders, on the folders root, with no way out of a folder.

::

    FOLDERS_ROOT/<folder id>/...        walk(): one openat() per path component,
                                        O_NOFOLLOW | O_DIRECTORY on every directory,
                                        O_NOFOLLOW on the last one
    FOLDERS_ROOT/.uploads/<id>.part     resumable uploads: appended at their offset,
                     <id>.json          renamed into the folder once complete

Every operation starts from the folder's own directory descriptor and opens one name at
a time relative to the one before (``dir_fd``), refusing symbolic links at every step
(``O_NOFOLLOW``): a link a session planted (``ln -s / escape``) is listed as a link,
can be removed or renamed as a link, and is never followed. Names are checked first
(:func:`contract.folders.split_path`: no ``..``, no absolute paths, no NUL).

When the gateway runs as root beside a rootless Podman user (``jobgate up`` as root),
whatever it creates is handed to that user (``JOBGATE_FOLDERS_UID``), so sessions, whose
root is that user, can write where uploads landed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.folders import UPLOADS_DIR, UnsafePath, folder_dir, split_path
from gateway.domain.errors import Conflict, Invalid, NotFound

__all__ = ["Entry", "FolderFS", "Upload"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_UPLOAD_ID = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class Entry:
    path: str
    type: str  # file | dir | symlink | other
    size: int
    mtime: float


@dataclass(frozen=True, slots=True)
class Upload:
    id: str
    folder_id: str
    path: str
    length: int
    user_id: str
    offset: int


def _invalid_path(exc: UnsafePath, field: str) -> Invalid:
    return Invalid(str(exc), field=field)


def _os_error(exc: OSError, path: str, field: str = "path") -> Exception:
    if exc.errno == errno.ENOENT:
        return NotFound(f"no {path!r} in this folder")
    if exc.errno == errno.ELOOP:
        return Invalid(
            f"{path!r} is or passes through a symbolic link; links are never followed",
            field=field,
        )
    if exc.errno == errno.ENOTDIR:
        return Invalid(f"a part of {path!r} is not a directory", field=field)
    if exc.errno == errno.EISDIR:
        return Conflict(f"{path!r} is a directory", field=field)
    if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
        return Conflict(f"{path!r} already exists", field=field)
    if exc.errno == errno.ENAMETOOLONG:
        return Invalid(f"{path!r} is too long", field=field)
    return exc


class FolderFS:
    def __init__(self, root: Path, owner_uid: int | None = None) -> None:
        self.root = root
        self.owner_uid = owner_uid if owner_uid is not None and os.geteuid() == 0 else None

    # -- folders ----------------------------------------------------------------------
    def directory(self, folder_id: str) -> Path:
        return folder_dir(self.root, folder_id)

    def create(self, folder_id: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.directory(folder_id)
        path.mkdir(mode=0o755, exist_ok=True)
        self._own(str(path))

    def purge(self, folder_id: str) -> None:
        """Delete the folder's tree (never following a link; long names are fine)."""
        path = self.directory(folder_id)
        if path.is_symlink():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)

    def usage(self, folder_id: str) -> int:
        """Bytes the folder's files hold (apparent sizes; a hard-linked file counts once).
        Walked by directory descriptors: a tree deeper than PATH_MAX is counted whole.
        A folder with no directory on disk (never created, or removed by hand) holds 0."""
        seen: set[tuple[int, int]] = set()
        total = 0
        walk = os.fwalk(self.directory(folder_id), follow_symlinks=False)
        try:
            for _, _, files, dir_fd in walk:
                for name in files:
                    try:
                        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                        if info.st_nlink > 1:
                            seen.add((info.st_dev, info.st_ino))
                        total += info.st_size
        except FileNotFoundError:  # only the top can raise it: fwalk skips what vanishes below
            return 0
        return total

    # -- walking --------------------------------------------------------------------
    @contextlib.contextmanager
    def _walk(self, folder_id: str, parts: list[str], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory ``parts`` inside the folder (links refused)."""
        fd = os.open(self.directory(folder_id), _DIR_FLAGS)
        try:
            for part in parts:
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except NotADirectoryError:  # O_DIRECTORY | O_NOFOLLOW on a link says this
                    info = os.stat(part, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISLNK(info.st_mode):
                        raise OSError(errno.ELOOP, "a symbolic link") from None
                    raise
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                        self._own(part, dir_fd=fd)
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def _own(self, name: str, dir_fd: int | None = None) -> None:
        if self.owner_uid is not None:
            os.chown(name, self.owner_uid, self.owner_uid, dir_fd=dir_fd, follow_symlinks=False)

    @staticmethod
    def _parts(path: str, field: str = "path", *, allow_root: bool = False) -> list[str]:
        try:
            return split_path(path, allow_root=allow_root)
        except UnsafePath as exc:
            raise _invalid_path(exc, field) from None

    # -- reading --------------------------------------------------------------------
    def list(self, folder_id: str, path: str, *, recursive: bool = False) -> list[Entry]:
        parts = self._parts(path, allow_root=True)
        prefix = "/".join(parts)
        try:
            with self._walk(folder_id, parts[:-1]) as parent:
                if parts:  # a file is listed as itself
                    info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
                    if not stat.S_ISDIR(info.st_mode):
                        return [_entry(prefix, info)]
            with self._walk(folder_id, parts) as fd:
                return sorted(self._scan(fd, prefix, recursive), key=lambda e: e.path)
        except OSError as exc:
            raise _os_error(exc, path) from None

    def _scan(self, fd: int, prefix: str, recursive: bool) -> Iterator[Entry]:
        for name in os.listdir(fd):
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            rel = f"{prefix}/{name}" if prefix else name
            yield _entry(rel, info)
            if recursive and stat.S_ISDIR(info.st_mode):
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                try:
                    yield from self._scan(sub, rel, recursive)
                finally:
                    os.close(sub)

    def open_file(self, folder_id: str, path: str) -> tuple[int, os.stat_result]:
        """A read descriptor of a regular file (the caller closes it)."""
        parts = self._parts(path)
        try:
            with self._walk(folder_id, parts[:-1]) as parent:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except OSError as exc:
            raise _os_error(exc, path) from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise Conflict(f"{path!r} is not a file (list a directory instead)", field="path")
        return fd, info

    # -- changing -------------------------------------------------------------------
    def remove(self, folder_id: str, path: str) -> None:
        """Delete a file, a link (itself) or a directory tree."""
        parts = self._parts(path)
        try:
            with self._walk(folder_id, parts[:-1]) as parent:
                info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    shutil.rmtree(parts[-1], dir_fd=parent)
                else:
                    os.unlink(parts[-1], dir_fd=parent)
        except OSError as exc:
            raise _os_error(exc, path) from None

    def move(self, folder_id: str, source: str, target: str) -> None:
        """Rename inside the folder; an existing target is never replaced."""
        src = self._parts(source, "source")
        dst = self._parts(target, "target")
        if dst[: len(src)] == src:
            raise Conflict("a directory cannot move into itself", field="target")
        try:
            with (
                self._walk(folder_id, src[:-1]) as src_fd,
                self._walk(folder_id, dst[:-1], create=True) as dst_fd,
            ):
                os.stat(src[-1], dir_fd=src_fd, follow_symlinks=False)
                try:
                    os.stat(dst[-1], dir_fd=dst_fd, follow_symlinks=False)
                except FileNotFoundError:
                    pass
                else:
                    raise Conflict(f"{target!r} already exists", field="target")
                os.rename(src[-1], dst[-1], src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        except OSError as exc:
            raise _os_error(exc, source, "source") from None

    def mkdir(self, folder_id: str, path: str) -> None:
        parts = self._parts(path)
        try:
            with self._walk(folder_id, parts, create=True):
                pass
        except OSError as exc:
            raise _os_error(exc, path) from None

    # -- resumable uploads ----------------------------------------------------------
    @property
    def uploads(self) -> Path:
        return self.root / UPLOADS_DIR

    def _upload_files(self, upload_id: str) -> tuple[Path, Path]:
        if not upload_id or len(upload_id) != 32 or not set(upload_id) <= _UPLOAD_ID:
            raise NotFound(f"no upload {upload_id!r}")
        return self.uploads / f"{upload_id}.json", self.uploads / f"{upload_id}.part"

    def check_target(self, folder_id: str, path: str) -> None:
        """Refuse an upload whose target can never be written (a directory, a link on
        the way) before any byte is sent."""
        parts = self._parts(path)
        try:
            with self._walk(folder_id, parts[:-1], create=False) as parent:
                info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _os_error(exc, path) from None
        if stat.S_ISDIR(info.st_mode):
            raise Conflict(f"{path!r} is a directory", field="path")

    def start_upload(self, folder_id: str, path: str, length: int, user_id: str) -> Upload:
        self._parts(path)
        self.check_target(folder_id, path)
        self.uploads.mkdir(mode=0o700, parents=True, exist_ok=True)
        upload_id = uuid.uuid4().hex
        meta, part = self._upload_files(upload_id)
        part.touch(mode=0o600)
        record = {"folder_id": folder_id, "path": path, "length": length, "user_id": user_id}
        meta.write_text(json.dumps(record))
        return Upload(upload_id, folder_id, path, length, user_id, 0)

    def upload(self, upload_id: str) -> Upload:
        meta, part = self._upload_files(upload_id)
        try:
            record: dict[str, Any] = json.loads(meta.read_text())
            offset = part.stat().st_size
        except (FileNotFoundError, ValueError):
            raise NotFound(f"no upload {upload_id!r} (finished, abandoned or never made)") from None
        return Upload(
            upload_id,
            str(record["folder_id"]),
            str(record["path"]),
            int(record["length"]),
            str(record["user_id"]),
            offset,
        )

    def open_part(self, upload_id: str, *, write: bool = True) -> int:
        """A descriptor of the upload's part file: to append to, or to read its size."""
        _, part = self._upload_files(upload_id)
        flags = os.O_WRONLY | os.O_APPEND if write else os.O_RDONLY
        try:
            return os.open(part, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise NotFound(f"no upload {upload_id!r} (finished, abandoned or never made)") from None

    def finish_upload(self, upload: Upload) -> None:
        """Move a complete upload into its folder (atomically; replaces a file there)."""
        meta, part = self._upload_files(upload.id)
        parts = self._parts(upload.path)
        try:
            with self._walk(upload.folder_id, parts[:-1], create=True) as parent:
                uploads_fd = os.open(self.uploads, _DIR_FLAGS)
                try:
                    os.chmod(part.name, 0o644, dir_fd=uploads_fd)
                    self._own(part.name, dir_fd=uploads_fd)
                    os.rename(part.name, parts[-1], src_dir_fd=uploads_fd, dst_dir_fd=parent)
                finally:
                    os.close(uploads_fd)
        except OSError as exc:
            raise _os_error(exc, upload.path) from None
        meta.unlink(missing_ok=True)

    def cancel_upload(self, upload_id: str) -> None:
        for path in self._upload_files(upload_id):
            path.unlink(missing_ok=True)

    def remove_stale_uploads(self, now: float, idle_s: float) -> int:
        """Uploads not written to for *idle_s* (their client went away for good)."""
        removed = 0
        if not self.uploads.is_dir():
            return 0
        for entry in os.scandir(self.uploads):
            if entry.name.endswith(".part") and now - entry.stat().st_mtime > idle_s:
                self.cancel_upload(entry.name.removesuffix(".part"))
                removed += 1
        return removed

    def pending_bytes(self, folder_ids: set[str]) -> int:
        """Bytes announced by uploads in flight into these folders (they count as used)."""
        total = 0
        if not self.uploads.is_dir():
            return 0
        for entry in os.scandir(self.uploads):
            if not entry.name.endswith(".json"):
                continue
            try:
                record = json.loads(Path(entry.path).read_text())
            except (OSError, ValueError):
                continue
            if record.get("folder_id") in folder_ids:
                total += int(record.get("length", 0))
        return total


def _entry(path: str, info: os.stat_result) -> Entry:
    mode = info.st_mode
    kind = (
        "dir"
        if stat.S_ISDIR(mode)
        else "file"
        if stat.S_ISREG(mode)
        else "symlink"
        if stat.S_ISLNK(mode)
        else "other"
    )
    return Entry(path, kind, info.st_size if kind == "file" else 0, info.st_mtime)
