"""Data folders on this node: the directories a kernel bind-mounts.

The gateway names each folder by id in the start message (``StartKernel.folders``);
the folder lives at ``FOLDERS_ROOT/<id>`` (``JOBGATE_FOLDERS_ROOT``), a shared file
system every node mounts at the same path (docs/folders.md). A folder that is not
there fails the start with a reason naming the root, which is what a node without the
shared storage mounted looks like.
"""

from __future__ import annotations

import os
from pathlib import Path

from contract.folders import UnsafePath, folder_dir
from contract.messages import WireFolder
from plugins.common import Mount
from plugins.runtimes.base import RuntimeFailure

__all__ = ["folder_env", "folder_mounts"]

#: where tools look for the per-user state the dot-folders keep (set unless the session
#: sets them itself): ``pip install --user`` lands in the mounted .local
_DOT_ENV = {".local": "PYTHONUSERBASE", ".cache": "XDG_CACHE_HOME", ".config": "XDG_CONFIG_HOME"}


def folder_mounts(folders: list[WireFolder], root: Path, *, can_mount: bool) -> list[Mount]:
    """The bind mounts for *folders*; automount folders are skipped where the runtime
    cannot mount (a plain-process node), asked-for ones fail the start there."""
    mounts = []
    real_root = Path(os.path.realpath(root))
    for folder in folders:
        if not can_mount:
            if folder.automount:
                continue
            raise RuntimeFailure(
                f"folder {folder.name!r} needs a container runtime to be mounted; "
                "this node runs sessions as plain processes"
            )
        try:
            path = folder_dir(root, folder.id)
        except UnsafePath as exc:
            raise RuntimeFailure(str(exc)) from None
        real = Path(os.path.realpath(path))
        if real.parent != real_root or not real.is_dir():
            raise RuntimeFailure(
                f"folder {folder.name!r} ({folder.id}) is not under this node's folders root "
                f"{root} (JOBGATE_FOLDERS_ROOT): is the shared storage mounted here?"
            )
        mounts.append(Mount(str(real), folder.target, folder.read_only))
    return mounts


def folder_env(folders: list[WireFolder]) -> dict[str, str]:
    """Variables pointing tools at the mounted dot-folders (``PYTHONUSERBASE`` ...)."""
    return {_DOT_ENV[f.name]: f.target for f in folders if f.name in _DOT_ENV}
