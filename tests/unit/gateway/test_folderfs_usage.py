"""``FolderFS.usage``: the bytes a folder shows and counts against its owner's quota."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from gateway.services.folderfs import FolderFS


def made(root: Path) -> tuple[FolderFS, str]:
    fs = FolderFS(root)
    folder_id = str(uuid.uuid4())
    fs.create(folder_id)
    return fs, folder_id


def test_a_folder_whose_directory_is_missing_holds_nothing(tmp_path: Path) -> None:
    fs, folder_id = made(tmp_path)
    fs.directory(folder_id).rmdir()
    assert fs.usage(folder_id) == 0


def test_a_folder_under_a_missing_root_holds_nothing(tmp_path: Path) -> None:
    assert FolderFS(tmp_path / "never-made").usage(str(uuid.uuid4())) == 0


def test_files_count_once_at_any_depth_and_links_are_not_followed(tmp_path: Path) -> None:
    fs, folder_id = made(tmp_path)
    top = fs.directory(folder_id)
    (top / "a" / "b").mkdir(parents=True)
    (top / "one.bin").write_bytes(b"x" * 100)
    (top / "a" / "b" / "two.bin").write_bytes(b"y" * 20)
    os.link(top / "one.bin", top / "a" / "again.bin")  # a hard link counts once
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"z" * 5000)
    (top / "escape").symlink_to(outside)
    (top / "up").symlink_to(tmp_path)
    assert fs.usage(folder_id) == 120
