"""The pass as a whole: purity, determinism, gangs, bad input, configuration errors."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from sched_builders import gpus, node, order_placed, session, snapshot, where

from plugins.scheduling import reasons
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.errors import SchedulerConfigError
from plugins.scheduling.pipeline import build_pipeline
from plugins.scheduling.planner import plan
from plugins.scheduling.types import SessionRequest


def mixed_snapshot() -> Any:
    nodes = [
        node("n1", cpu=4, devices=gpus("a", 2, numa=[0, 1]), numa_cpus={0: [0, 1], 1: [2, 3]}),
        node("n2", cpu=8, used={"cpu": 2}),
        node("n3", cpu=2, status="draining"),
        node("n4", cpu=16, devices=gpus("b", 4, slot="cuda.device")),
    ]
    pending = [
        session("s1", cpu=1, slots={"cuda.shares": "0.5"}, at=1),
        session("s2", cpu=2, at=2, cluster_size=2),
        session("s3", cpu=3, slots={"cuda.device": 2}, at=3, priority=70),
        session("s4", cpu=1, at=4, depends_on=["gone"]),
        session("s5", cpu=32, at=5),
        session("s6", cpu=1, at=6, slots={"cuda.shares": "1.5"}),
    ]
    return snapshot(nodes, pending, dependency_status={"gone": "FAILED"})


def test_plan_does_not_touch_the_snapshot() -> None:
    snap = mixed_snapshot()
    before = copy.deepcopy(snap)
    plan(snap)
    assert snap == before


def test_every_pending_session_gets_exactly_one_outcome_with_words() -> None:
    snap = mixed_snapshot()
    result = plan(snap)
    placed = set(order_placed(result))
    assert placed | set(result.waiting) | set(result.cancelled) == {s.id for s in snap.pending}
    assert len(placed) + len(result.waiting) + len(result.cancelled) == len(snap.pending)
    assert all(result.waiting.values())
    assert all(result.cancelled.values())
    assert set(result.codes) == set(result.waiting) | set(result.cancelled)


def test_same_snapshot_in_any_order_gives_the_same_plan() -> None:
    snap = mixed_snapshot()
    expected = plan(snap)
    for seed in range(5):
        shuffled = copy.deepcopy(snap)
        random.Random(seed).shuffle(shuffled.nodes)
        random.Random(seed + 100).shuffle(shuffled.pending)
        again = plan(shuffled)
        assert sorted(again.placements, key=lambda p: p.session_id) == sorted(
            expected.placements, key=lambda p: p.session_id
        )
        assert again.waiting == expected.waiting
        assert again.cancelled == expected.cancelled


# ---- gangs ------------------------------------------------------------------------------
def test_gang_is_all_or_nothing_and_gives_back_what_it_tried() -> None:
    # the gang is tried first (oldest), holds n1 and n2, finds no room for its third
    # container, gives both back; "solo" then gets n1
    nodes = [node("n1", cpu=2), node("n2", cpu=2)]
    pending = [session("gang", cpu=2, cluster_size=3, at=0), session("solo", cpu=2, at=1)]
    result = plan(snapshot(nodes, pending, {"sequencer": "drf"}))
    assert where(result) == {"solo": ["n1"]}
    assert result.waiting["gang"] == (
        "no node fits: container 3 of 3: 2 nodes lack cpu (largest free 0)"
    )
    assert result.codes["gang"] == reasons.NO_FIT


def test_gang_places_every_container() -> None:
    nodes = [node("n1", cpu=4), node("n2", cpu=4)]
    result = plan(snapshot(nodes, [session("gang", cpu=2, cluster_size=4)]))
    assert sorted(where(result)["gang"]) == ["n1", "n1", "n2", "n2"]


def test_gang_on_distinct_nodes() -> None:
    config = {"gang": {"name": "all-or-nothing", "options": {"distinct_nodes": True}}}
    nodes = [node("n1", cpu=8), node("n2", cpu=8)]
    spread = plan(snapshot(nodes, [session("g", cpu=1, cluster_size=2)], config))
    assert sorted(where(spread)["g"]) == ["n1", "n2"]
    too_many = plan(snapshot(nodes, [session("g", cpu=1, cluster_size=3)], config))
    assert too_many.waiting["g"] == (
        "no node fits: container 3 of 3: 2 nodes hold another container of it"
    )


def test_gang_quota_is_counted_once_per_session() -> None:
    from sched_builders import limits

    nodes = [node("n1", cpu=8)]
    result = plan(
        snapshot(
            nodes,
            [session("g", cluster_size=3), session("h", at=1)],
            user_limits={"alice": limits(2)},
        )
    )
    assert order_placed(result) == ["g", "h"]


# ---- bad input and limits of a pass -------------------------------------------------------
@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        pytest.param(
            session("x", cluster_size=0),
            "invalid request: cluster_size must be at least 1 (got 0)",
            id="cluster-size",
        ),
        pytest.param(
            session("x", priority=101),
            "invalid request: priority 101 is outside 0-100",
            id="priority",
        ),
    ],
)
def test_invalid_requests_wait_with_a_reason_and_do_not_stop_the_pass(
    bad: SessionRequest, reason: str
) -> None:
    result = plan(snapshot([node("n1")], [bad, session("ok", at=1)]))
    assert result.waiting == {"x": reason}
    assert result.codes["x"] == reasons.INVALID
    assert order_placed(result) == ["ok"]


def test_negative_request_is_invalid() -> None:
    from plugins.resources import ResourceSlots
    from plugins.scheduling.types import SessionRequest as Req

    bad = Req(
        id="x",
        owner="a",
        requested=ResourceSlots.parse({"cpu": -1}, allow_negative=True),
        created_at=session("y").created_at,
    )
    result = plan(snapshot([node("n1")], [bad]))
    assert result.waiting == {
        "x": "invalid request: cpu must be a finite amount of at least 0 (got -1)"
    }


def test_max_sessions_per_pass_leaves_the_rest_waiting_with_their_position() -> None:
    pending = [session(f"s{k}", at=k) for k in range(4)]
    result = plan(snapshot([node("n1", cpu=64)], pending, {"max_sessions_per_pass": 2}))
    assert order_placed(result) == ["s0", "s1"]
    assert result.waiting == {
        "s2": "not considered: position 3 in the queue; a pass looks at the first 2",
        "s3": "not considered: position 4 in the queue; a pass looks at the first 2",
    }
    assert result.codes["s2"] == reasons.NOT_CONSIDERED


def test_identical_requests_that_failed_share_the_reason() -> None:
    nodes = [node("n1", cpu=4, used={"cpu": 3}), node("n2", status="cordoned")]
    pending = [session(f"s{k}", cpu=2, at=k) for k in range(50)]
    result = plan(snapshot(nodes, pending, {"sequencer": "lifo"}))
    assert set(result.waiting.values()) == {
        "no node fits: 1 node lacks cpu (largest free 1), 1 cordoned"
    }


def test_a_pass_fills_the_cluster_and_stops_at_exactly_full() -> None:
    nodes = [node(f"n{k}", cpu=4, mem="4g") for k in range(10)]
    pending = [session(f"s{k:03d}", cpu=1, mem="1g", at=k) for k in range(100)]
    result = plan(snapshot(nodes, pending, {"sequencer": "lifo"}))
    assert len(result.placements) == 40
    per_node: dict[str, int] = {}
    for nodes_of in where(result).values():
        for n in nodes_of:
            per_node[n] = per_node.get(n, 0) + 1
    assert set(per_node.values()) == {4}


# ---- configuration ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("config", "message"),
    [
        pytest.param({"sequencer": "nope"}, "no sequencer plugin 'nope'", id="unknown-plugin"),
        pytest.param(
            {"scorers": [{"name": "concentrated", "options": {"bogus": 1}}]},
            "scorer 'concentrated': bad options",
            id="bad-options",
        ),
        pytest.param(
            {
                "sequencer": {
                    "name": "heuristic-fifo",
                    "options": {"max_skips": 5, "reserve_after": 5},
                }
            },
            "reserve_after must be larger than max_skips",
            id="plugin-own-validation",
        ),
    ],
)
def test_bad_plugin_configuration_is_refused_with_a_message(
    config: dict[str, Any], message: str
) -> None:
    with pytest.raises(SchedulerConfigError, match=message):
        build_pipeline(SchedulerConfig.model_validate(config))
    with pytest.raises(SchedulerConfigError, match=message):
        plan(snapshot([node("n1")], [session("s")], config))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param({"filters": ["labels"]}, "must include 'fits'", id="fits-is-required"),
        pytest.param({"filters": ["fits", "fits"]}, "lists fits more than once", id="duplicate"),
        pytest.param({"sample_size": -1}, "greater than or equal to 0", id="negative-sample"),
        pytest.param(
            {"scorers": [{"name": "numa", "weight": -1}]},
            "greater than or equal",
            id="negative-weight",
        ),
        pytest.param({"sequencer": "fifo", "colour": "red"}, "Extra inputs", id="unknown-field"),
    ],
)
def test_config_validation(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SchedulerConfig.model_validate(raw)


def test_config_accepts_short_names_and_round_trips_as_json() -> None:
    config = SchedulerConfig.model_validate(
        {
            "sequencer": "drf",
            "filters": ["node-status", "fits"],
            "scorers": [{"name": "dispersed", "weight": 2}],
        }
    )
    assert config.sequencer.name == "drf"
    assert [f.name for f in config.filters] == ["node-status", "fits"]
    assert SchedulerConfig.model_validate_json(config.model_dump_json()) == config
    assert SchedulerConfig.model_validate({}) == SchedulerConfig()
