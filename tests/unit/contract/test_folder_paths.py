"""Paths inside data folders, byte ranges and ``--folder`` specs: tables of named cases."""

from __future__ import annotations

import pytest
import typer

from contract.folders import UnsafePath, perm_allows, split_path
from gateway.api.tus import Unsatisfiable
from gateway.api.tus import byte_range as _range
from jobgate.commands.run import folder_mount

HOSTILE = {
    "parent": "..",
    "parent first": "../etc/passwd",
    "parent inside": "a/../../b",
    "parent last": "a/..",
    "dot": "a/./b",
    "absolute": "/etc/passwd",
    "double slash": "a//b",
    "nul": "a\x00b",
    "long name": "x" * 256,
    "long path": "/".join(["y" * 200] * 21),
}


@pytest.mark.parametrize("path", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_path_that_could_leave_the_folder_is_refused(path: str) -> None:
    with pytest.raises(UnsafePath):
        split_path(path)


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("a", ["a"]),
        ("a/b/c.txt", ["a", "b", "c.txt"]),
        ("dir/", ["dir"]),
        ("..hidden/...", ["..hidden", "..."]),
        ("名前/ファイル", ["名前", "ファイル"]),
        ("x" * 255, ["x" * 255]),
    ],
)
def test_ordinary_paths_split_into_their_names(path: str, parts: list[str]) -> None:
    assert split_path(path) == parts


def test_the_folder_itself_only_where_allowed() -> None:
    assert split_path("", allow_root=True) == []
    assert split_path("/", allow_root=True) == []
    with pytest.raises(UnsafePath):
        split_path("")


def test_permissions_nest() -> None:
    assert perm_allows("wd", "ro")
    assert perm_allows("rw", "rw")
    assert perm_allows("ro", "ro")
    assert not perm_allows("ro", "rw")
    assert not perm_allows("rw", "wd")
    assert not perm_allows(None, "ro")


@pytest.mark.parametrize(
    ("header", "want"),
    [
        (None, None),
        ("bytes=0-9", (0, 9)),
        ("bytes=10-", (10, 99)),
        ("bytes=-5", (95, 99)),
        ("bytes=90-500", (90, 99)),
        ("bytes=-500", (0, 99)),
        ("bytes=0-1,5-6", None),  # several ranges: the whole file
        ("items=0-1", None),
        ("bytes=x-y", None),
        ("bytes=\u00b2-", None),  # a digit to str.isdigit(), not to int(): ignored, not a 500
        ("bytes=1-\u00b2", None),
    ],
)
def test_ranges_of_a_100_byte_file(header: str | None, want: tuple[int, int] | None) -> None:
    assert _range(header, 100) == want


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=5-2", "bytes=-0"])
def test_ranges_outside_the_file_are_unsatisfiable(header: str) -> None:
    with pytest.raises(Unsatisfiable):
        _range(header, 100)


def test_no_suffix_range_of_an_empty_file_is_satisfiable() -> None:
    with pytest.raises(Unsatisfiable):  # was (0, -1): "Content-Range: bytes 0--1/0"
        _range("bytes=-5", 0)


@pytest.mark.parametrize(
    ("spec", "mount"),
    [
        ("data", {"name": "data", "read_only": False}),
        ("data:ro", {"name": "data", "read_only": True}),
        ("data:/in", {"name": "data", "read_only": False, "target": "/in"}),
        ("data:/in:ro", {"name": "data", "read_only": True, "target": "/in"}),
        (".local:rw", {"name": ".local", "read_only": False}),
    ],
)
def test_folder_options(spec: str, mount: dict[str, object]) -> None:
    assert folder_mount(spec) == mount


@pytest.mark.parametrize("spec", ["", ":ro", "data:relative", "data:/a:/b", "data:/a:ro:ro"])
def test_bad_folder_options(spec: str) -> None:
    with pytest.raises(typer.BadParameter):
        folder_mount(spec)
