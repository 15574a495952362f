"""Slurm nodes as jobgate nodes, and Slurm's job ends as exit statuses (captured output)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from plugins.accelerators.base import Allocation, ReservationError
from plugins.accelerators.node import NodeAccelerators
from plugins.runtimes.slurm.nodes import SlurmGpus, attached_nodes, node_capacity, node_labels
from plugins.runtimes.slurm.records import parse_job, parse_node
from plugins.runtimes.slurm.runtime import exit_status

OUTPUT = Path(__file__).parent / "slurm_output"


def nodes() -> list[str]:
    return (OUTPUT / "nodes.txt").read_text().splitlines()


def test_capacity_and_labels_come_from_slurm() -> None:
    node = parse_node(nodes()[0])
    assert node_capacity(node).to_json() == {"cpu": "2", "mem": str(1024 * 1024 * 1024)}
    assert node_labels(node) == {"slurm.partition": "debug"}
    featured = parse_node(
        nodes()[0].replace("AvailableFeatures=(null)", "AvailableFeatures=ib,nvme")
    )
    assert node_labels(featured) == {"ib": "true", "nvme": "true", "slurm.partition": "debug"}


def test_gres_gpus_are_cuda_devices_of_their_type() -> None:
    accelerators = NodeAccelerators([SlurmGpus(parse_node(nodes()[0]))])
    found = accelerators.fingerprint()
    assert [(d.id, d.kind, d.model, d.slot) for d in found.devices] == [
        ("node1-gpu0", "cuda", "tesla", "cuda.device"),
        ("node1-gpu1", "cuda", "tesla", "cuda.device"),
    ]
    assert found.capacity.to_json() == {"cuda.device": "2"}
    assert accelerators.reserve({"cuda.device": {"node1-gpu1": "1"}}).env == {}
    with pytest.raises(ReservationError):
        SlurmGpus(parse_node(nodes()[0])).reserve(
            Allocation("cuda.device", {"node1-gpu7": Decimal(1)})
        )


def test_only_available_nodes_of_the_partitions_are_attached() -> None:
    drained = parse_node((OUTPUT / "node_drained.txt").read_text())
    node1 = parse_node(nodes()[0])
    assert [n.name for n in attached_nodes([node1, drained], ["debug"])] == ["node1"]
    assert attached_nodes([node1], ["other"]) == []
    assert [n.name for n in attached_nodes([node1], [])] == ["node1"]


def test_exit_statuses() -> None:
    failed = exit_status(parse_job((OUTPUT / "failed.txt").read_text()))
    assert (failed.exit_code, failed.reason, failed.oom_killed) == (3, None, False)
    assert failed.ended_at is not None
    termed = exit_status(parse_job((OUTPUT / "termed.txt").read_text()))
    assert (termed.exit_code, termed.reason) == (143, "killed by signal 15 (SIGTERM)")
    cancelled = exit_status(parse_job((OUTPUT / "cancelled.txt").read_text()))
    assert (cancelled.exit_code, cancelled.reason) == (143, "cancelled in Slurm")
    line = (OUTPUT / "failed.txt").read_text()
    oom = exit_status(parse_job(line.replace("JobState=FAILED", "JobState=OUT_OF_MEMORY")))
    assert (oom.exit_code, oom.oom_killed) == (3, True)
    timeout = exit_status(
        parse_job(line.replace("JobState=FAILED", "JobState=TIMEOUT").replace("3:0", "0:15"))
    )
    assert (timeout.exit_code, timeout.reason) == (
        143,
        "Slurm's time limit ran out; killed by signal 15 (SIGTERM)",
    )
