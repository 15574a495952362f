"""Exact placement on devices: fractions, even splits, whole devices, health, NUMA."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from sched_builders import gpus, node, session, snapshot

from plugins.scheduling import reasons
from plugins.scheduling.planner import plan
from plugins.scheduling.types import NodeState, Plan, SessionRequest

D = Decimal


def shares(session_id: str, amount: str, at: int = 0, cpu: object = 1) -> SessionRequest:
    return session(session_id, cpu=cpu, at=at, slots={"cuda.shares": amount})


def devices_of(result: Plan) -> dict[str, dict[str, Decimal]]:
    """session id -> {device id: amount} over its (single) container."""
    out = {}
    for p in result.placements:
        (kernel,) = p.kernels
        out[p.session_id] = {d: a for per in kernel.devices.values() for d, a in per.items()}
    return out


@pytest.mark.parametrize(
    ("the_node", "pending", "placed", "waiting"),
    [
        pytest.param(
            # an 8 GB GPU offered as 2 shares: 1.5 + 0.5 fill it, 0.1 more does not fit
            node("n", devices=gpus("g", 1, cap="2")),
            [shares("a", "1.5", 0), shares("b", "0.5", 1), shares("c", "0.1", 2)],
            {"a": {"g0": D("1.5")}, "b": {"g0": D("0.5")}},
            {"c": "no node fits: 1 node lacks cuda.shares (largest free 0)"},
            id="8gb-gpu-two-shares-per-device",
        ),
        pytest.param(
            # two 1-share GPUs, three sessions of a whole share each
            node("n", devices=gpus("g", 2)),
            [shares("a", "1", 0), shares("b", "1", 1), shares("c", "1", 2)],
            {"a": {"g0": D(1)}, "b": {"g1": D(1)}},
            {"c": "no node fits: 1 node lacks cuda.shares (largest free 0)"},
            id="two-fgpu-three-one-share-sessions",
        ),
        pytest.param(
            # one 1-share GPU, three sessions of 0.4
            node("n", devices=gpus("g", 1)),
            [shares("a", "0.4", 0), shares("b", "0.4", 1), shares("c", "0.4", 2)],
            {"a": {"g0": D("0.4")}, "b": {"g0": D("0.4")}},
            {"c": "no node fits: 1 node lacks cuda.shares (largest free 0.2)"},
            id="one-share-per-device-three-0.4",
        ),
        pytest.param(
            # the accelerator issue's example: 0.8 is free in total, but no device has 0.6
            node("n", devices=gpus("g", 2)),
            [shares("a", "0.6", 0), shares("b", "0.6", 1), shares("c", "0.6", 2)],
            {"a": {"g0": D("0.6")}, "b": {"g1": D("0.6")}},
            {"c": "no node fits: 1 node lacks 0.6 cuda.shares on one device (largest free 0.4)"},
            id="three-0.6-on-two-gpus-never-split",
        ),
        pytest.param(
            node("n", devices=gpus("g", 2)),
            [shares("a", "1.5")],
            {"a": {"g0": D("0.75"), "g1": D("0.75")}},
            {},
            id="even-split-over-the-fewest-devices",
        ),
        pytest.param(
            node("n", devices=gpus("g", 3, quantum="0.1")),
            [shares("a", "1.5")],
            {"a": {"g0": D("0.8"), "g1": D("0.7")}},
            {},
            id="split-remainder-quantum-goes-to-the-first-device",
        ),
        pytest.param(
            node("n", devices=gpus("g", 3, used=["0.5", "0.5", "0.5"])),
            [shares("a", "1.5")],
            {"a": {"g0": D("0.5"), "g1": D("0.5"), "g2": D("0.5")}},
            {},
            id="split-over-more-devices-when-two-lack-room",
        ),
        pytest.param(
            node("n", devices=gpus("g", 2, used=["0", "0.3"])),
            [shares("a", "1.5")],
            {},
            {"a": "no node fits: 1 node lacks 1.5 cuda.shares split over devices (largest free 1)"},
            id="split-impossible",
        ),
        pytest.param(
            node("n", devices=gpus("g", 2, quantum="0.1")),
            [shares("a", "0.15")],
            {},
            {"a": "no node fits: 1 node cannot give 0.15 cuda.shares in steps of 0.1"},
            id="not-a-multiple-of-the-quantum",
        ),
        pytest.param(
            node("n", devices=gpus("g", 2, used=["0.5", "0"])),
            [shares("a", "0.4")],
            {"a": {"g0": D("0.4")}},
            {},
            id="best-fit-device-keeps-whole-gpus-free",
        ),
        pytest.param(
            node("n", devices=gpus("g", 2, unhealthy=[0])),
            [shares("a", "0.5", 0), shares("b", "0.5", 1), shares("c", "0.5", 2)],
            {"a": {"g1": D("0.5")}, "b": {"g1": D("0.5")}},
            {"c": "no node fits: 1 node lacks 0.5 cuda.shares on one device (largest free 0)"},
            id="unhealthy-device-takes-nothing",
        ),
        pytest.param(
            node("n", devices=gpus("g", 4, slot="cuda.device", used=["1", "0", "0", "0"])),
            [session("a", slots={"cuda.device": 2}), session("b", slots={"cuda.device": 2}, at=1)],
            {"a": {"g1": D(1), "g2": D(1)}},
            {"b": "no node fits: 1 node lacks cuda.device (largest free 1)"},
            id="whole-devices-take-free-devices",
        ),
        pytest.param(
            node("n", devices=gpus("g", 2, slot="cuda.device")),
            [session("a", slots={"cuda.device": "0.5"})],
            {},
            {"a": "no node fits: 1 node cannot give 0.5 cuda.device in steps of 1"},
            id="whole-device-slots-take-no-fractions",
        ),
        pytest.param(
            node("n", devices=gpus("g", 3, slot="cuda.device", unhealthy=[1])),
            [session("a", slots={"cuda.device": 2})],
            {"a": {"g0": D(1), "g2": D(1)}},
            {},
            id="whole-devices-skip-unhealthy",
        ),
    ],
)
def test_device_placement(
    the_node: NodeState,
    pending: list[SessionRequest],
    placed: dict[str, dict[str, Decimal]],
    waiting: dict[str, str],
) -> None:
    result = plan(snapshot([the_node], pending))
    assert devices_of(result) == placed
    assert result.waiting == waiting


def test_fractional_reason_names_the_slot_per_device() -> None:
    result = plan(
        snapshot([node("n", devices=gpus("g", 2, used=["0.6", "0.6"]))], [shares("a", "0.6")])
    )
    assert result.codes["a"] == reasons.NO_FIT
    assert result.waiting["a"] == (
        "no node fits: 1 node lacks 0.6 cuda.shares on one device (largest free 0.4)"
    )


NUMA = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}


def numa_node(**fields: Any) -> NodeState:
    return node(
        "n",
        cpu=8,
        devices=gpus("g", 4, slot="cuda.device", numa=[0, 0, 1, 1]),
        numa_cpus=NUMA,
        **fields,
    )


@pytest.mark.parametrize(
    ("the_node", "the_session", "devices", "cpuset"),
    [
        pytest.param(
            numa_node(),
            session("s", cpu=2, slots={"cuda.device": 1}),
            ["g0"],
            [0, 1],
            id="pinned-to-the-devices-numa-node",
        ),
        pytest.param(
            numa_node(),
            session("s", cpu="1.5", slots={"cuda.device": 2}),
            ["g0", "g1"],
            [0, 1],
            id="whole-devices-on-one-numa-node-ceil-cpus",
        ),
        pytest.param(
            numa_node(used_cpus={0, 1, 2}),
            session("s", cpu=2, slots={"cuda.device": 1}),
            ["g2"],
            [4, 5],
            id="prefers-the-numa-node-with-free-cpus",
        ),
        pytest.param(
            numa_node(used_cpus={0, 1, 2, 5, 6, 7}),
            session("s", cpu=2, slots={"cuda.device": 1}),
            ["g0"],
            None,
            id="no-numa-node-has-the-cpus-no-pinning",
        ),
        pytest.param(
            numa_node(),
            session("s", cpu=2, slots={"cuda.device": 3}),
            ["g0", "g1", "g2"],
            None,
            id="devices-span-numa-nodes-no-pinning",
        ),
        pytest.param(numa_node(), session("s", cpu=2), [], None, id="cpu-only-never-pinned"),
    ],
)
def test_numa_pinning(
    the_node: NodeState, the_session: SessionRequest, devices: list[str], cpuset: list[int] | None
) -> None:
    (placement,) = plan(snapshot([the_node], [the_session])).placements
    (kernel,) = placement.kernels
    assert sorted(kernel.devices.get("cuda.device", {})) == devices
    assert kernel.cpuset == cpuset


def test_pinned_cpus_are_not_given_twice_in_one_pass() -> None:
    pending = [session(f"s{k}", cpu=2, at=k, slots={"cuda.device": 1}) for k in range(4)]
    result = plan(snapshot([numa_node()], pending))
    cpusets = [k.cpuset for p in result.placements for k in p.kernels]
    assert cpusets == [[0, 1], [2, 3], [4, 5], [6, 7]]
