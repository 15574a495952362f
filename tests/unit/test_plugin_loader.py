"""Plugins load from versioned entry points, checked against their Protocol."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar, Protocol

import pytest

from plugins.loader import RUNTIMES, PluginError, load_group, load_one, protocol_members
from plugins.runtimes.base import Runtime


class _Greeter(Protocol):
    name: ClassVar[str]

    def greet(self) -> str: ...


def _install(tmp_path: Path, dist: str, group: str, entries: dict[str, str], code: str) -> None:
    """A tiny installed distribution: a module and a dist-info with entry points."""
    (tmp_path / f"{dist}_mod.py").write_text(code)
    info = tmp_path / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.endswith("_mod")]:
        del sys.modules[name]


GOOD = "class Hello:\n    name = 'hello'\n    def greet(self):\n        return 'hi'\n"
BAD = "class Mute:\n    name = 'mute'\n"


def test_protocol_members() -> None:
    assert protocol_members(_Greeter) == {"name", "greet"}
    assert {"start", "wait", "logs", "list_kernels", "Settings"} <= protocol_members(Runtime)


def test_third_party_plugin_is_found(site: Path) -> None:
    _install(site, "extra", "test.greeters.v1", {"hello": "extra_mod:Hello"}, GOOD)
    plugins = load_group("test.greeters.v1", _Greeter)
    assert plugins["hello"]().greet() == "hi"


def test_a_plugin_missing_members_is_refused(site: Path) -> None:
    _install(site, "broken", "test.greeters.v1", {"mute": "broken_mod:Mute"}, BAD)
    with pytest.raises(PluginError, match="missing greet"):
        load_group("test.greeters.v1", _Greeter)


def test_duplicate_names_are_refused(site: Path) -> None:
    _install(site, "one", "test.greeters.v1", {"hello": "one_mod:Hello"}, GOOD)
    _install(site, "two", "test.greeters.v1", {"hello": "two_mod:Hello"}, GOOD)
    with pytest.raises(PluginError, match="duplicate plugin name 'hello'"):
        load_group("test.greeters.v1", _Greeter)


def test_unknown_name_lists_what_exists() -> None:
    with pytest.raises(PluginError) as err:
        load_one(RUNTIMES, "docker", Runtime)
    assert "process" in str(err.value)
    assert "podman" in str(err.value)
