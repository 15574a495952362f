"""The planner's pass-local caches decide exactly as computing everything afresh would.

* ``Search.choose`` keeps each feasible node's weighted score on the shape's sticky walk
  and resumes the walk where the last search left it; the reference here walks from the
  cursor every time (no resumption) and scores every candidate again.
* ``Search.eligible`` keeps each static filter's verdict per node and filter key, and
  asks a filter again only for a key it has not seen; the reference asks every filter
  (up to the first that rejects) once per node and static key.
* ``Shapes`` finds a session's shape by the request fields the filters' keys read; the
  reference asks every filter for its key, every time.

Both are compared on whole plans (hypothesis snapshots of ``test_sched_properties``,
every sequencer, scorer set, sample size and scan) and on the benchmark's cluster.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from pydantic import BaseModel
from sched_builders import bench_scheduler, node, session, snapshot
from test_sched_properties import snapshots

from plugins.scheduling import planner
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.filters import NoSettings
from plugins.scheduling.pipeline import pipeline_for
from plugins.scheduling.planner import _Pass, plan
from plugins.scheduling.reasons import Rejection
from plugins.scheduling.search import Search
from plugins.scheduling.shapes import Shapes, signature
from plugins.scheduling.state import NodeView, Shape
from plugins.scheduling.types import Plan, SessionRequest, Snapshot


class FreshSearch(Search):
    """Every static verdict asked, every search from the shape's cursor, every candidate
    scored again."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.resumable = False

    def eligible(self, shape: Shape) -> tuple[list[NodeView], list[Rejection]]:
        found = self._eligible.get(shape.static_key)
        if found is None:
            ok: list[NodeView] = []
            rejected: list[Rejection] = []
            for node in self.nodes:
                rejection = next(
                    (v for f in self.static if (v := f.check(node, shape, self.ctx))), None
                )
                if rejection is None:
                    ok.append(node)
                else:
                    rejected.append(rejection)
            found = self._eligible[shape.static_key] = (ok, rejected)
        return found

    def choose(self, shape: Shape, exclude: frozenset[str], remember: bool) -> NodeView | None:
        found = self.candidates(shape, exclude, remember)
        if not found:
            return None
        if not self.scorers:
            return min(found, key=lambda n: n.order)
        totals = self._totals(found, shape)
        return min(zip(found, totals, strict=True), key=lambda nt: (-nt[1], nt[0].order))[0]


class KeysOnly(Shapes):
    """Every session's shape through every filter's key."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.signature = None


def fresh_plan(snap: Snapshot, monkeypatch: pytest.MonkeyPatch) -> Plan:
    with monkeypatch.context() as patched:
        patched.setattr(planner, "Search", FreshSearch)
        patched.setattr(planner, "Shapes", KeysOnly)
        return plan(snap)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_cached_plans_equal_fresh_ones(snap: Snapshot) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert plan(snap) == fresh_plan(snap, monkeypatch)


@pytest.mark.parametrize(
    ("mix", "config"),
    [
        ("mixed", {}),
        ("mixed", {"sample_size": 3, "sequencer": "lifo"}),
        ("fraction", {"scorers": [{"name": "numa"}, {"name": "concentrated", "weight": 0.5}]}),
    ],
)
def test_cached_plans_equal_fresh_ones_pass_after_pass(
    mix: str, config: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The benchmark's cluster, small: nodes fill up, sessions finish, passes resume."""
    sim = bench_scheduler()
    args = argparse.Namespace(mix=mix, nodes=40, sessions=600, seed=3)
    now = datetime(2026, 11, 20, 14, 0, tzinfo=UTC)
    sim_nodes, pending = sim.build(args, now)
    nodes = {n.id: n for n in sim_nodes}
    running: list[Any] = []
    placed = 0
    for number in range(1, 5):
        snap = Snapshot(
            now,
            [n.state() for n in sim_nodes],
            pending,
            config=SchedulerConfig.model_validate(config),
        )
        result = plan(snap)
        assert result == fresh_plan(snap, monkeypatch)
        placed += len(result.placements)
        sim.apply(result, nodes, running, random.Random(number))
        pending = sim.still_pending(pending, result)
        running = sim.finish(running, nodes)
        now += timedelta(seconds=2)
    assert placed > 100


# ---- Shapes: the lookup by fields --------------------------------------------------------
def shapes_of(*requests: SessionRequest) -> list[Shape]:
    snap = snapshot([node("n1", cpu=8)], list(requests))
    run = _Pass(pipeline_for(snap.config), snap)
    run._prepare(list(requests))
    return [run._shape(r) for r in requests]


def test_what_keys_ignore_shares_a_shape() -> None:
    a = session("a", cpu=2, owner="alice", priority=10, constraints={"x": "1", "y": "2"})
    b = session("b", cpu=2, owner="bob", priority=90, constraints={"y": "2", "x": "1"}, at=5)
    c = session("c", cpu=2, constraints={"x": "1", "y": "2"}, cluster_size=2)
    d = session("d", cpu=2, constraints={"x": "1", "y": "3"})
    e = session("e", cpu=3, constraints={"x": "1", "y": "2"})
    sa, sb, sc, sd, se = shapes_of(a, b, c, d, e)
    assert sa is sb  # constraints in another order: another signature, the same keys
    assert len({id(sa), id(sc), id(sd), id(se)}) == 4


def test_built_in_filters_name_what_their_keys_read() -> None:
    pipeline = pipeline_for(SchedulerConfig())
    read = signature(pipeline.filters)
    assert read is not None
    r = session("a", cpu=2, constraints={"x": "1"}, arch="arm64")
    assert read(r) == read(replace(r, id="b", owner="bob", priority=1, attempts=9))
    for changed in (
        {"constraints": {"x": "2"}},
        {"arch": "x86_64"},
        {"cluster_size": 2},
        {"requires_limits": True},
        {"needs_mounts": True},
        {"has_image": True},
        {"resource_group": "other"},
        {"requested": session("c", cpu=3).requested},
    ):
        assert read(r) != read(replace(r, **changed)), changed


class _Unsaid:
    """A filter that does not name what its key reads."""

    name: ClassVar[str] = "unsaid"
    static: ClassVar[bool] = True
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def key(self, request: SessionRequest) -> str:
        return request.owner

    def check(self, node: NodeView, shape: Shape, ctx: Any) -> None:
        return None


def test_a_filter_that_does_not_say_what_it_reads_keeps_the_keys() -> None:
    pipeline = pipeline_for(SchedulerConfig())
    assert signature((*pipeline.filters, _Unsaid())) is None
    assert signature((_Unsaid(),)) is None
