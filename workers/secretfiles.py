"""Secret files of a kernel on this node (docs/secrets.md): ``STATE/secrets/<kernel ref>/
<name>``, mode 0400 in a 0700 directory, removed with the kernel's working directory."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from contract.messages import SecretValue

__all__ = ["remove_secret_files", "secrets_dir", "write_secret_files"]


def secrets_dir(state_root: Path, kernel_ref: str) -> Path:
    return state_root / "secrets" / kernel_ref


def write_secret_files(root: Path, items: Iterable[SecretValue]) -> None:
    root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.rmtree(root, ignore_errors=True)  # a retried start writes them afresh
    root.mkdir(mode=0o700)
    for item in items:
        path = root / item.name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400)
        with os.fdopen(fd, "w") as out:
            out.write(item.value)


def remove_secret_files(state_root: Path, kernel_ref: str) -> None:
    shutil.rmtree(secrets_dir(state_root, kernel_ref), ignore_errors=True)
