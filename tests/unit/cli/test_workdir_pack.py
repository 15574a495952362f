"""Packing a working directory: git's ignore rules, the same tree → the same digest, the cap."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from jobgate.workdir import WorkdirError, pack, scan


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def names(root: Path) -> list[str]:
    return [e.rel for e in scan(root)]


def test_gitignore_semantics_nested_negation_dir_only_and_anchoring(tmp_path: Path) -> None:
    root = tree(
        tmp_path / "proj",
        {
            ".gitignore": "*.log\n!keep.log\nbuild/\n/top.txt\n__pycache__/\n",
            "train.py": "print(1)\n",
            "data.csv": "a,b\n",
            "run.log": "x",
            "keep.log": "kept by negation",
            "top.txt": "anchored: only at the root",
            "sub/top.txt": "not anchored here",
            "build/out.bin": "x",
            "sub/build": "a file called build is not a directory: kept",
            "src/__pycache__/m.pyc": "x",
            "src/m.py": "x",
            "src/.gitignore": "local.py\n!run.log\n",
            "src/local.py": "ignored by the nested file",
            "src/run.log": "re-included by the deeper file",
            ".git/HEAD": "never packed",
        },
    )
    assert names(root) == [
        ".gitignore",
        "data.csv",
        "keep.log",
        "src",
        "src/.gitignore",
        "src/m.py",
        "src/run.log",
        "sub",
        "sub/build",
        "sub/top.txt",
        "train.py",
    ]


def test_jobgateignore_wins_over_gitignore(tmp_path: Path) -> None:
    root = tree(
        tmp_path / "p",
        {
            ".gitignore": "data/\n",
            ".jobgateignore": "!data/\n*.ckpt\n",
            "data/x.csv": "needed by the job, though git ignores it",
            "model.ckpt": "big",
            "train.py": "",
        },
    )
    assert names(root) == [".gitignore", ".jobgateignore", "data", "data/x.csv", "train.py"]


def test_same_tree_same_digest_whatever_the_mtimes_and_owners(tmp_path: Path) -> None:
    files = {"train.py": "print(1)\n", "data/a.csv": "1\n", "data/b.csv": "2\n"}
    one = tree(tmp_path / "one", files)
    two = tree(tmp_path / "two", dict(reversed(list(files.items()))))
    os.utime(two / "train.py", (1, 1))
    first, second = pack(one), pack(two)
    try:
        assert first.digest == second.digest
        assert first.digest.startswith("sha256:")
        assert len(first.digest) == 71
        assert (first.files, first.content_bytes) == (3, 13)
        with tarfile.open(first.path) as tar:
            members = tar.getmembers()
        assert [m.name for m in members] == ["data", "data/a.csv", "data/b.csv", "train.py"]
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
        (two / "train.py").write_text("print(2)\n")
        third = pack(two)
        assert third.digest != first.digest  # one byte differs: another blob
        third.close()
    finally:
        first.close()
        second.close()


def test_executable_bit_is_kept_and_other_modes_normalised(tmp_path: Path) -> None:
    root = tree(tmp_path / "p", {"run.sh": "#!/bin/sh\n", "notes.txt": ""})
    (root / "run.sh").chmod(0o700)
    (root / "notes.txt").chmod(0o600)
    packed = pack(root)
    with tarfile.open(packed.path) as tar:
        modes = {m.name: m.mode for m in tar.getmembers()}
    packed.close()
    assert modes == {"notes.txt": 0o644, "run.sh": 0o755}


def test_size_cap_names_the_size_and_the_biggest_entries(tmp_path: Path) -> None:
    root = tree(
        tmp_path / "p", {"train.py": "x" * 10, "data/big.bin": "y" * 3000, "w.bin": "z" * 900}
    )
    with pytest.raises(WorkdirError) as caught:
        pack(root, max_bytes=2048)
    message = str(caught.value)
    assert "holds 3.8 KiB of files, over the 2.0 KiB limit" in message
    assert "biggest: data/ 2.9 KiB, w.bin 900 B, train.py 10 B" in message
    assert ".jobgateignore" in message
    assert not list(tmp_path.glob("jobgate-workdir-*"))  # nothing half-written left


def test_symlinks_inside_are_kept_outside_refused(tmp_path: Path) -> None:
    root = tree(tmp_path / "p", {"data/a.csv": "1", "train.py": ""})
    (root / "latest.csv").symlink_to("data/a.csv")
    assert "latest.csv" in names(root)
    (root / "secrets").symlink_to("/etc/passwd")
    with pytest.raises(WorkdirError, match="secrets is a symbolic link to /etc/passwd"):
        pack(root)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(WorkdirError, match="is not a directory"):
        pack(tmp_path / "missing")
