"""jobgate's top-level package names: the list is the one pyproject installs, and a second
distribution that installs one of them too is found and named at `jobgate up`."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from jobgate.commands.up import _warn_collisions
from jobgate.installed import NAMES, collisions

ROOT = Path(__file__).resolve().parents[3]


def test_the_names_are_what_pyproject_installs() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(p.removesuffix("*") for p in include) == sorted(NAMES)


def test_jobgate_alone_collides_with_nothing() -> None:
    assert collisions() == {}


def test_another_distribution_with_a_gateway_package_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    info = tmp_path / "acme_gateway-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-gateway\nVersion: 2.0\n")
    (info / "top_level.txt").write_text("gateway\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    assert collisions() == {"gateway": ["acme-gateway"]}
    _warn_collisions()
    err = capsys.readouterr().err
    assert "acme-gateway also installs a top-level 'gateway' package" in err
    assert "pipx install jobgate" in err
