"""Every plugin call is guarded: a crash fails the pass naming the plugin and the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sched_builders import install_plugin_package, node, session, snapshot, where

from plugins.scheduling.errors import PlanError
from plugins.scheduling.pipeline import reset_registry
from plugins.scheduling.planner import plan

CRASHERS = '''
from typing import ClassVar

from pydantic import BaseModel


class NoSettings(BaseModel):
    pass


class _Base:
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init__(self, settings):
        self.settings = settings


class BadValidator(_Base):
    name: ClassVar[str] = "bad"

    def check(self, request, ctx):
        return {}["quota"]


class LateSequencer(_Base):
    """Yields one session, then crashes while the planner asks for the next."""

    name: ClassVar[str] = "late"

    def order(self, band, ctx):
        yield band[0]
        raise ZeroDivisionError("late")

    def blocks(self, request, ctx):
        return False


class BadKey(_Base):
    name: ClassVar[str] = "bad-key"
    static: ClassVar[bool] = True

    def key(self, request):
        raise ValueError("no key")

    def check(self, node, shape, ctx):
        return None


class BadScorer(_Base):
    name: ClassVar[str] = "bad"

    def score(self, nodes, shape, ctx):
        raise TypeError("scoring")


class ShortScorer(_Base):
    name: ClassVar[str] = "short"

    def score(self, nodes, shape, ctx):
        return [1.0]


class BadGang(_Base):
    name: ClassVar[str] = "bad"

    def place(self, request, placer):
        placer.place()
        raise RuntimeError("gang")
'''

ENTRIES = {
    "validator.bad": "crashers:BadValidator",
    "sequencer.late": "crashers:LateSequencer",
    "filter.bad-key": "crashers:BadKey",
    "scorer.bad": "crashers:BadScorer",
    "scorer.short": "crashers:ShortScorer",
    "gang.bad": "crashers:BadGang",
}


@pytest.fixture(autouse=True)
def crashers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    install_plugin_package(tmp_path, "crashers", CRASHERS, ENTRIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    reset_registry()
    yield
    reset_registry()


NODES = [node("a", cpu=8), node("b", cpu=8)]
PENDING = [session("s1", at=0), session("s2", at=1)]


@pytest.mark.parametrize(
    ("config", "plugin", "session_id", "cause"),
    [
        ({"validators": ["bad"]}, "validator.bad", "s1", KeyError),
        ({"sequencer": "late"}, "sequencer.late", "s1", ZeroDivisionError),
        ({"filters": ["bad-key", "fits"]}, "filter.bad-key", "s1", ValueError),
        ({"scorers": ["bad"]}, "scorer.bad", "s1", TypeError),
        ({"scorers": ["short"]}, "scorer.short", "s1", ValueError),
        ({"gang": "bad"}, "gang.bad", "s1", RuntimeError),
    ],
)
def test_a_crash_names_the_plugin_and_the_session(
    config: dict[str, object], plugin: str, session_id: str, cause: type[Exception]
) -> None:
    with pytest.raises(PlanError) as info:
        plan(snapshot(NODES, PENDING, config))
    assert (info.value.plugin, info.value.session_id) == (plugin, session_id)
    assert isinstance(info.value.__cause__, cause)
    assert f"scheduler plugin {plugin} failed while deciding session {session_id}" in str(
        info.value
    )


def test_the_same_snapshot_plans_again_once_the_plugin_is_out_of_the_config() -> None:
    with pytest.raises(PlanError):
        plan(snapshot(NODES, PENDING, {"scorers": ["bad"]}))
    assert where(plan(snapshot(NODES, PENDING))) == {"s1": ["a"], "s2": ["a"]}
