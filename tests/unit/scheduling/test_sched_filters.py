"""Filters: which nodes may take a session, and the words when none may."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import gpus, node, session, snapshot, where

from plugins.scheduling import reasons
from plugins.scheduling.filters import (
    ArchitectureFilter,
    FitsFilter,
    FractionEnforcementFilter,
    ImagesFilter,
    LabelsFilter,
    LimitsEnforcedFilter,
    MountsFilter,
    NodeStatusFilter,
    ResourceGroupFilter,
)
from plugins.scheduling.pipeline import pipeline_for
from plugins.scheduling.planner import _Pass, plan
from plugins.scheduling.reasons import Rejection
from plugins.scheduling.types import NodeState, SessionRequest

SHARES = {"cuda.shares": "0.5"}


@pytest.mark.parametrize(
    ("the_node", "the_session", "config", "reason"),
    [
        pytest.param(
            node("n1", resource_group="gpu"),
            session("s"),
            {},
            "no node fits: 1 node in another resource group",
            id="resource-group",
        ),
        pytest.param(
            node("n1", status="draining"),
            session("s"),
            {},
            "no node fits: 1 node draining",
            id="status-draining",
        ),
        pytest.param(
            node("n1", status="cordoned"),
            session("s"),
            {},
            "no node fits: 1 node cordoned",
            id="status-cordoned",
        ),
        pytest.param(
            node("n1", status="lost"),
            session("s"),
            {},
            "no node fits: 1 node lost",
            id="status-lost",
        ),
        pytest.param(
            node("n1", arch="aarch64"),
            session("s", arch="x86_64"),
            {},
            "no node fits: 1 node not x86_64",
            id="architecture",
        ),
        pytest.param(
            node("n1", labels={"gpu_model": "V100"}),
            session("s", constraints={"gpu_model": "A100"}),
            {},
            "no node fits: 1 node without gpu_model=A100",
            id="labels-other-value",
        ),
        pytest.param(
            node("n1"),
            session("s", constraints={"zone": "b"}),
            {},
            "no node fits: 1 node without zone=b",
            id="labels-missing",
        ),
        pytest.param(
            node("n1"),
            session("s", requires_limits=True),
            {},
            "no node fits: 1 node without enforced cpu/mem limits",
            id="limits-asked-by-session",
        ),
        pytest.param(
            node("n1"),
            session("s"),
            {"require_limits_enforced": True},
            "no node fits: 1 node without enforced cpu/mem limits",
            id="limits-required-by-operator",
        ),
        pytest.param(
            node("n1", bind_mounts=False),
            session("s", needs_mounts=True),
            {},
            "no node fits: 1 node cannot mount host directories",
            id="mounts-on-a-process-node",
        ),
        pytest.param(
            node("n1", devices=gpus("g", 1), fraction_enforcement="none"),
            session("s", slots=SHARES),
            {},
            "no node fits: 1 node without fraction enforcement",
            id="fractions-unenforced",
        ),
        pytest.param(
            node("n1", cpu=2, used={"cpu": "0.5"}),
            session("s", cpu=2),
            {},
            "no node fits: 1 node lacks cpu (largest free 1.5)",
            id="fits-cpu",
        ),
        pytest.param(
            node("n1", mem="2g", used={"mem": "1g"}),
            session("s", mem="1.5g"),
            {},
            "no node fits: 1 node lacks mem (largest free 1GiB)",
            id="fits-mem",
        ),
        pytest.param(
            node("n1"),
            session("s", slots={"cuda.device": 1}),
            {},
            "no node fits: 1 node has no cuda.device",
            id="fits-slot-not-offered",
        ),
    ],
)
def test_rejection_reasons(
    the_node: NodeState, the_session: SessionRequest, config: dict[str, Any], reason: str
) -> None:
    result = plan(snapshot([the_node], [the_session], config))
    assert result.placements == []
    assert result.waiting == {"s": reason}


@pytest.mark.parametrize(
    ("the_node", "the_session", "config"),
    [
        pytest.param(
            node("n1", resource_group="gpu"),
            session("s", resource_group="gpu"),
            {},
            id="same-resource-group",
        ),
        pytest.param(
            node("n1", arch="x86_64"), session("s", arch="amd64"), {}, id="architecture-alias"
        ),
        pytest.param(node("n1", arch="aarch64"), session("s"), {}, id="no-architecture-asked"),
        pytest.param(
            node("n1", labels={"gpu_model": "A100", "zone": "a"}),
            session("s", constraints={"gpu_model": "A100"}),
            {},
            id="labels-match",
        ),
        pytest.param(
            node("n1", limits_enforced=True),
            session("s", requires_limits=True),
            {},
            id="limits-enforced-node",
        ),
        pytest.param(
            node("n1"), session("s", needs_mounts=True), {}, id="mounts-on-a-container-node"
        ),
        pytest.param(
            node("n1", bind_mounts=False), session("s"), {}, id="no-mounts-on-a-process-node"
        ),
        pytest.param(
            node("n1", devices=gpus("g", 1), fraction_enforcement="none"),
            session("s", slots=SHARES),
            {"allow_unenforced_fractions": True},
            id="fractions-allowed-by-group",
        ),
        pytest.param(
            node("n1", devices=gpus("g", 1), fraction_enforcement="mps"),
            session("s", slots=SHARES),
            {},
            id="fractions-enforced-by-mps",
        ),
        pytest.param(
            node("n1", devices=gpus("g", 1, slot="cuda.device"), fraction_enforcement="none"),
            session("s", slots={"cuda.device": 1}),
            {},
            id="whole-device-needs-nothing",
        ),
        pytest.param(
            node("n1", cpu=2, used={"cpu": 1}), session("s", cpu=1), {}, id="fits-exactly"
        ),
    ],
)
def test_accepted(the_node: NodeState, the_session: SessionRequest, config: dict[str, Any]) -> None:
    result = plan(snapshot([the_node], [the_session], config))
    assert where(result) == {"s": ["n1"]}


def test_reason_summarises_every_node_biggest_group_first() -> None:
    nodes = [
        node(f"n{k}", cpu=2, used={"cpu": used})
        for k, used in enumerate(["1", "0.5", "1.5", "2", "1"])
    ]
    nodes += [node("d1", status="draining"), node("d2", status="draining")]
    result = plan(snapshot(nodes, [session("s", cpu=2)]))
    assert result.waiting["s"] == "no node fits: 5 nodes lack cpu (largest free 1.5), 2 draining"
    assert reasons.short_reason(result.waiting["s"]) == "no node fits"


def test_empty_resource_group_says_so() -> None:
    result = plan(snapshot([], [session("s")]))
    assert result.waiting["s"] == "no node fits: resource group default has no nodes"
    assert result.codes["s"] == reasons.UNSCHEDULABLE


def test_too_big_for_every_node_is_unschedulable() -> None:
    result = plan(snapshot([node("n1", cpu=4)], [session("s", cpu=8)]))
    assert result.codes["s"] == reasons.UNSCHEDULABLE
    assert result.waiting["s"] == (
        "no node fits: 1 node lacks cpu (largest free 4) (too big for every node)"
    )


# ---- each filter's own verdict and reason constant -----------------------------------------
def verdict(
    filter_cls: Any, the_node: NodeState, the_session: SessionRequest, **config: Any
) -> Rejection | None:
    """Run one filter on one node the way a pass does, explaining (full detail)."""
    snap = snapshot([the_node], [the_session], config)
    run = _Pass(pipeline_for(snap.config), snap)
    run._prepare([the_session])
    shape = run._shape(the_session)
    run.ctx.explaining = True
    check = filter_cls(filter_cls.Settings()).check
    result: Rejection | None = check(run.views[0], shape, run.ctx)
    return result


@pytest.mark.parametrize(
    ("filter_cls", "the_node", "the_session", "code", "detail"),
    [
        pytest.param(
            ResourceGroupFilter,
            node("n", resource_group="x"),
            session("s"),
            reasons.OTHER_GROUP,
            "",
            id="resource-group",
        ),
        pytest.param(
            NodeStatusFilter,
            node("n", status="draining"),
            session("s"),
            reasons.DRAINING,
            "",
            id="node-status",
        ),
        pytest.param(
            ArchitectureFilter,
            node("n", arch="ppc64le"),
            session("s", arch="arm64"),
            reasons.ARCH,
            "aarch64",
            id="architecture",
        ),
        pytest.param(
            LabelsFilter,
            node("n"),
            session("s", constraints={"a": "1"}),
            reasons.LABEL,
            "a=1",
            id="labels",
        ),
        pytest.param(
            LimitsEnforcedFilter,
            node("n"),
            session("s", requires_limits=True),
            reasons.NO_LIMITS,
            "",
            id="limits-enforced",
        ),
        pytest.param(
            MountsFilter,
            node("n", bind_mounts=False),
            session("s", needs_mounts=True),
            reasons.NO_MOUNTS,
            "",
            id="mounts",
        ),
        pytest.param(
            FractionEnforcementFilter,
            node("n", devices=gpus("g", 1), fraction_enforcement="none"),
            session("s", slots=SHARES),
            reasons.UNENFORCED,
            "",
            id="fraction-enforcement",
        ),
        pytest.param(
            FitsFilter, node("n", cpu=1), session("s", cpu=2), reasons.LACKS, "cpu", id="fits-slot"
        ),
        pytest.param(
            FitsFilter,
            node("n", devices=gpus("g", 2, used=["0.5", "0.7"])),
            session("s", slots={"cuda.shares": "0.6"}),
            reasons.DEVICE,
            "cuda.shares on one device",
            id="fits-device",
        ),
        pytest.param(
            FitsFilter,
            node("n", devices=gpus("g", 1, quantum="0.1")),
            session("s", slots={"cuda.shares": "0.15"}),
            reasons.QUANTUM,
            "cuda.shares in steps of 0.1",
            id="fits-quantum",
        ),
    ],
)
def test_each_filter_rejects_with_its_constant(
    filter_cls: type, the_node: NodeState, the_session: SessionRequest, code: str, detail: str
) -> None:
    rejection = verdict(filter_cls, the_node, the_session)
    assert rejection is not None
    assert (rejection.code, rejection.detail) == (code, detail)


def test_filters_refuse_cheaply_while_searching() -> None:
    snap = snapshot([node("n", cpu=1)], [session("s", cpu=2)])
    run = _Pass(pipeline_for(snap.config), snap)
    run._prepare(snap.pending)
    shape = run._shape(snap.pending[0])
    assert FitsFilter(FitsFilter.Settings()).check(run.views[0], shape, run.ctx) is (
        reasons.REFUSED
    )


@pytest.mark.parametrize(
    ("images", "has_image", "code"),
    [
        pytest.param("required", False, reasons.NEEDS_IMAGE, id="podman-without-image"),
        pytest.param("required", True, None, id="podman-with-image"),
        pytest.param("ignored", True, reasons.NO_IMAGES, id="process-with-image"),
        pytest.param("ignored", False, None, id="process-without-image"),
        pytest.param("optional", True, None, id="sim-with-image"),
        pytest.param("required", None, None, id="unknown-request"),
    ],
)
def test_images_filter_keeps_sessions_on_runtimes_that_can_run_them(
    images: str, has_image: bool | None, code: str | None
) -> None:
    rejection = verdict(ImagesFilter, node("n", images=images), session("s", has_image=has_image))
    assert (rejection.code if rejection else None) == code
