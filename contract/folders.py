"""Data folders: names, paths inside a folder, and where a folder lives on the storage root.

A folder's directory is named by its id, never by its display name::

    FOLDERS_ROOT/                       (JOBGATE_FOLDERS_ROOT, the same path on every node)
        <folder id>/                    the folder's files; bind-mounted into sessions
        .uploads/<upload id>.json|.part resumable uploads in flight (gateway only)

so a rename or a long name never touches the file system. Both the gateway (which
streams files in and out) and the workers (which bind-mount the directories) import
this module; neither imports the other.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

__all__ = [
    "AUTOMOUNT_PREFIX",
    "FOLDER_ID_PATTERN",
    "FOLDER_NAME_PATTERN",
    "FOLDER_PATH_OR_ROOT_PATTERN",
    "FOLDER_PATH_PATTERN",
    "MAX_PATH_BYTES",
    "PERMS",
    "STALE_UPLOAD_S",
    "UPLOADS_DIR",
    "UnsafePath",
    "folder_dir",
    "is_automount",
    "perm_allows",
    "split_path",
]

#: a display name: a leading dot makes it an automount folder (``.local``, ``.cache``)
FOLDER_NAME_PATTERN: Final = r"^\.?[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
FOLDER_ID_PATTERN: Final = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
AUTOMOUNT_PREFIX: Final = "."
UPLOADS_DIR: Final = ".uploads"
#: a resumable upload nobody appended to for this long is deleted (its quota freed);
#: until then the next identical ``jobgate folders put`` resumes it
STALE_UPLOAD_S: Final = 24 * 3600.0
MAX_PATH_BYTES: Final = 4096
MAX_NAME_BYTES: Final = 255
#: one name: not empty, "." or "..", no "/" or NUL, at most 255 characters (the byte
#: limits, over UTF-8, are :func:`split_path`'s: a pattern cannot count bytes)
_NAME = r"(?:[^/\x00.][^/\x00]{0,254}|\.[^/\x00.][^/\x00]{0,253}|\.\.[^/\x00]{1,253})"
#: what :func:`split_path` accepts, as the OpenAPI document says it: relative, names
#: joined by single slashes, an optional trailing slash
FOLDER_PATH_PATTERN: Final = rf"^{_NAME}(?:/{_NAME})*/?$"
#: the same, or the folder itself ("", "/" or ".")
FOLDER_PATH_OR_ROOT_PATTERN: Final = rf"^(?:|/|\.|{_NAME}(?:/{_NAME})*/?)$"
#: ro ⊂ rw ⊂ wd: read; read and write; read, write and delete
PERMS: Final = ("ro", "rw", "wd")
_ID = re.compile(FOLDER_ID_PATTERN)


class UnsafePath(ValueError):
    """A path that could leave its folder (``..``, absolute, NUL, too long)."""


def is_automount(name: str) -> bool:
    return name.startswith(AUTOMOUNT_PREFIX)


def perm_allows(held: str | None, wanted: str) -> bool:
    """Whether permission *held* includes *wanted* (None: no access at all)."""
    return held is not None and PERMS.index(held) >= PERMS.index(wanted)


def folder_dir(root: Path, folder_id: str) -> Path:
    """The directory of a folder under the folders root (ids only: no traversal)."""
    if not _ID.match(folder_id):
        raise UnsafePath(f"not a folder id: {folder_id!r}")
    return root / folder_id


def split_path(path: str, *, allow_root: bool = False) -> list[str]:
    """The components of a path inside a folder, refusing anything that could leave it.

    ``a/b/c.txt`` -> ``["a", "b", "c.txt"]``. Refused: absolute paths, ``..`` and ``.``,
    empty components (``a//b``), NUL bytes, components over 255 bytes, paths over 4096
    bytes. ``""`` (and ``/`` alone) is the folder itself, where *allow_root* says so.
    Symbolic links are handled where paths are opened (never followed).
    """
    if "\x00" in path:
        raise UnsafePath("a path must not contain a NUL byte")
    if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise UnsafePath(f"a path must be at most {MAX_PATH_BYTES} bytes")
    if path in ("", "/", "."):
        if allow_root:
            return []
        raise UnsafePath("a path inside the folder is needed")
    if path.startswith("/"):
        raise UnsafePath(f"paths are relative to the folder, not absolute: {path!r}")
    parts = path.rstrip("/").split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise UnsafePath(f"a path must not contain empty, '.' or '..' parts: {path!r}")
        if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
            raise UnsafePath(f"a name in the path is over {MAX_NAME_BYTES} bytes")
    return parts
