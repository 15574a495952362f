"""Built-in plugins come from the literal registries; entry points only bring others'.

The built-ins must work from a plain source checkout (nothing installed), a plugin of
another distribution joins through its entry points, and nobody may take a built-in's
name.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from plugins.accelerators.base import AcceleratorPlugin
from plugins.loader import (
    ACCELERATORS,
    RUNTIMES,
    SCHEDULERS,
    PluginError,
    load_group,
    load_one,
    names,
)
from plugins.runtimes.base import Runtime
from plugins.runtimes.sim import SimRuntime
from plugins.scheduling.errors import SchedulerConfigError
from plugins.scheduling.pipeline import reset_registry
from plugins.scheduling.planner import plan

ROOT = Path(__file__).resolve().parents[2]
BUILDERS = ROOT / "tests" / "unit" / "scheduling"
sys.path.insert(0, str(BUILDERS))
from sched_builders import node, session, snapshot, where  # noqa: E402

PLAN_FROM_SOURCE = """
import importlib.metadata as md, json, sys
try:
    md.distribution("jobgate")
    installed = True
except md.PackageNotFoundError:
    installed = False
import plugins
from plugins.loader import ACCELERATORS, RUNTIMES, load_one
from plugins.accelerators.base import AcceleratorPlugin
from plugins.runtimes.base import Runtime
from plugins.scheduling.planner import plan
from sched_builders import node, session, snapshot, where

nodes = [node("a", cpu=2), node("b", cpu=8)]
config = {"sequencer": "drf", "scorers": ["dispersed"]}
result = plan(snapshot(nodes, [session("s1", cpu=2), session("s2", cpu=2)], config))
print(json.dumps({
    "installed": installed,
    "plugins_from": plugins.__path__[0],
    "where": where(result),
    "runtime": load_one(RUNTIMES, "sim", Runtime).__name__,
    "accelerator": load_one(ACCELERATORS, "mock", AcceleratorPlugin).__name__,
}))
"""


def _site_without_jobgate(tmp: Path) -> Path:
    """site-packages as links, less jobgate's dist-info and editable finder."""
    site = Path(sysconfig.get_paths()["purelib"])
    linked = tmp / "site"
    linked.mkdir()
    for entry in site.iterdir():
        lowered = entry.name.lower()
        if lowered.startswith(("jobgate", "__editable__")) or entry.suffix == ".pth":
            continue
        (linked / entry.name).symlink_to(entry)
    return linked


def test_plan_runs_from_a_source_checkout_with_nothing_installed(tmp_path: Path) -> None:
    # a copy of the sources alone: the checkout has jobgate.egg-info from `pip install -e`
    src = tmp_path / "src"
    shutil.copytree(ROOT / "plugins", src / "plugins", ignore=shutil.ignore_patterns("__py*"))
    site = _site_without_jobgate(tmp_path)
    env = {"PYTHONPATH": f"{src}:{BUILDERS}:{site}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-S", "-c", PLAN_FROM_SOURCE],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {
        "installed": False,  # importlib.metadata cannot see jobgate at all
        "plugins_from": str(src / "plugins"),
        "where": {"s1": ["b"], "s2": ["b"]},
        "runtime": "SimRuntime",
        "accelerator": "MockPlugin",
    }


def test_the_built_ins_are_listed_without_any_entry_point() -> None:
    assert {"process", "sim", "podman"} <= set(names(RUNTIMES))
    assert {"cuda", "rocm", "tpu", "mock"} <= set(names(ACCELERATORS))
    assert {"filter.fits", "sequencer.drf", "gang.all-or-nothing"} <= set(names(SCHEDULERS))
    assert load_one(RUNTIMES, "sim", Runtime) is SimRuntime


OTHERS = """
from typing import ClassVar

from pydantic import BaseModel


class NoSettings(BaseModel):
    pass


class Greenest:
    name: ClassVar[str] = "greenest"
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init__(self, settings):
        self.settings = settings

    def score(self, nodes, shape, ctx):
        return [1.0 if n.state.labels.get("power") == "green" else 0.0 for n in nodes]


class FakeMock:
    name: ClassVar[str] = "mock"
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def fingerprint(self): ...
    def reserve(self, request): ...
    def stats(self): ...
"""


def _distribution(root: Path, dist: str, entries: dict[str, dict[str, str]]) -> None:
    """What ``pip install`` of another distribution leaves: a module and its dist-info."""
    (root / f"{dist}.py").write_text(OTHERS)
    info = root / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    sections = [
        f"[{group}]\n" + "\n".join(f"{n} = {target}" for n, target in items.items())
        for group, items in entries.items()
    ]
    (info / "entry_points.txt").write_text("\n\n".join(sections) + "\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    reset_registry()
    yield tmp_path
    reset_registry()
    for name in [m for m in sys.modules if m.startswith("acme_")]:
        del sys.modules[name]


def test_a_plugin_of_another_distribution_joins_the_built_ins(site: Path) -> None:
    _distribution(site, "acme_green", {SCHEDULERS: {"scorer.greenest": "acme_green:Greenest"}})
    assert "scorer.greenest" in names(SCHEDULERS)
    nodes = [node("a", cpu=8), node("b", cpu=8, labels={"power": "green"})]
    chosen = plan(snapshot(nodes, [session("s")], {"scorers": ["greenest"]}))
    assert where(chosen) == {"s": ["b"]}


def test_a_plugin_taking_a_built_in_name_is_refused(site: Path) -> None:
    _distribution(
        site,
        "acme_clash",
        {
            SCHEDULERS: {"filter.fits": "acme_clash:Greenest"},
            ACCELERATORS: {"mock": "acme_clash:FakeMock"},
        },
    )
    with pytest.raises(PluginError, match=r"duplicate plugin name 'mock'.*acme_clash") as err:
        load_group(ACCELERATORS, AcceleratorPlugin)
    assert "built-in plugins.accelerators.mock:MockPlugin" in str(err.value)
    with pytest.raises(SchedulerConfigError, match=r"duplicate plugin name 'filter.fits'"):
        plan(snapshot([node("a", cpu=8)], [session("s")]))


def test_stale_entry_points_into_our_own_package_are_not_duplicates(site: Path) -> None:
    _distribution(site, "jobgate_old", {RUNTIMES: {"sim": "plugins.runtimes.sim:SimRuntime"}})
    assert load_one(RUNTIMES, "sim", Runtime) is SimRuntime
