"""The plugin seam from outside: a package published through entry points, like pip would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sched_builders import install_plugin_package, node, order_placed, session, snapshot, where

from plugins.scheduling.errors import PlanError, SchedulerConfigError
from plugins.scheduling.pipeline import reset_registry
from plugins.scheduling.planner import plan

ACME = '''
from collections.abc import Hashable, Iterator, Sequence
from typing import ClassVar

from pydantic import BaseModel


class GreenSettings(BaseModel):
    label: str = "power"
    value: str = "green"


class GreenestScorer:
    """Prefers nodes running on green power (a label), whatever else they offer."""

    name: ClassVar[str] = "greenest"
    Settings: ClassVar[type[BaseModel]] = GreenSettings

    def __init__(self, settings):
        self.settings = settings

    def score(self, nodes, shape, ctx):
        s = self.settings
        return [1.0 if n.state.labels.get(s.label) == s.value else 0.0 for n in nodes]


class NoSettings(BaseModel):
    pass


class SmallestFirst:
    """Tries the sessions asking the fewest cpus first."""

    name: ClassVar[str] = "smallest-first"
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init__(self, settings):
        self.settings = settings

    def order(self, band, ctx):
        return iter(sorted(band, key=lambda s: (s.requested["cpu"], s.id)))

    def blocks(self, request, ctx):
        return False


class Exploding:
    """A filter with a bug in it."""

    name: ClassVar[str] = "exploding"
    Settings: ClassVar[type[BaseModel]] = NoSettings
    static: ClassVar[bool] = False

    def __init__(self, settings):
        self.settings = settings

    def key(self, request):
        return None

    def check(self, node, shape, ctx):
        raise KeyError("gpu_temperature")


class HalfAScorer:
    """Forgot to implement score()."""

    name: ClassVar[str] = "half"
    Settings: ClassVar[type[BaseModel]] = NoSettings
'''


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    install_plugin_package(
        tmp_path,
        "acme_sched",
        ACME,
        {
            "scorer.greenest": "acme_sched:GreenestScorer",
            "sequencer.smallest-first": "acme_sched:SmallestFirst",
            "filter.exploding": "acme_sched:Exploding",
            "scorer.half": "acme_sched:HalfAScorer",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reset_registry()
    yield
    reset_registry()


NODES = [
    node("a-grey", cpu=8, labels={"power": "coal"}),
    node("b-green", cpu=8, labels={"power": "green"}),
]


@pytest.mark.usefixtures("acme")
def test_a_third_party_scorer_is_picked_by_name_from_the_group_config() -> None:
    default = plan(snapshot(NODES, [session("s")]))
    greenest = plan(snapshot(NODES, [session("s")], {"scorers": [{"name": "greenest"}]}))
    assert (where(default), where(greenest)) == ({"s": ["a-grey"]}, {"s": ["b-green"]})


@pytest.mark.usefixtures("acme")
def test_third_party_settings_come_from_the_options() -> None:
    config = {"scorers": [{"name": "greenest", "options": {"value": "coal"}}]}
    assert where(plan(snapshot(NODES, [session("s")], config))) == {"s": ["a-grey"]}


@pytest.mark.usefixtures("acme")
def test_a_third_party_sequencer_orders_each_priority_band() -> None:
    one_slot = [node("n", cpu=2)]
    pending = [
        session("big", cpu=2, at=0),
        session("tiny", cpu=1, at=5),
        session("urgent", cpu=2, at=9, priority=90),
    ]
    result = plan(snapshot(one_slot, pending, {"sequencer": "smallest-first"}))
    assert order_placed(result) == ["urgent"]
    result = plan(snapshot(one_slot, pending[:2], {"sequencer": "smallest-first"}))
    assert order_placed(result) == ["tiny"]


@pytest.mark.usefixtures("acme")
def test_a_crashing_plugin_fails_the_pass_loudly_naming_itself() -> None:
    config = {"filters": ["node-status", "exploding", "fits"]}
    expected = r"filter\.exploding failed while deciding session s"
    with pytest.raises(PlanError, match=expected) as info:
        plan(snapshot(NODES, [session("s")], config))
    assert info.value.plugin == "filter.exploding"
    assert info.value.session_id == "s"
    assert isinstance(info.value.__cause__, KeyError)


@pytest.mark.usefixtures("acme")
def test_a_plugin_missing_part_of_its_contract_is_refused() -> None:
    with pytest.raises(SchedulerConfigError, match="does not implement Scorer: missing score"):
        plan(snapshot(NODES, [session("s")], {"scorers": ["half"]}))


def test_without_the_package_the_name_is_unknown_and_the_error_lists_what_exists() -> None:
    reset_registry()
    with pytest.raises(SchedulerConfigError, match=r"no scorer plugin 'greenest'.*concentrated"):
        plan(snapshot(NODES, [session("s")], {"scorers": ["greenest"]}))
