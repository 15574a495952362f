"""NUMA topology and the small sysfs readers every plugin shares."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from plugins.accelerators.fake_sysfs import write_numa_nodes
from plugins.accelerators.sysfs import (
    normalise_pci_bus_id,
    parse_cpulist,
    pci_numa_node,
    read_int,
)
from plugins.accelerators.topology import numa_cpus


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        pytest.param({0: "0-3", 1: "4-7"}, {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}, id="two-nodes"),
        pytest.param(
            {0: "0-1,4-5", 1: "2-3,6-7"},
            {0: [0, 1, 4, 5], 1: [2, 3, 6, 7]},
            id="interleaved-hyperthreads",
        ),
        pytest.param({0: "0-3", 1: ""}, {0: [0, 1, 2, 3], 1: []}, id="memory-only-node"),
        pytest.param({1: "0-1", 0: "2-3"}, {0: [2, 3], 1: [0, 1]}, id="sorted-by-node"),
    ],
)
def test_numa_cpus(tmp_path: Path, nodes: dict[int, str], expected: dict[int, list[int]]) -> None:
    write_numa_nodes(tmp_path, nodes)
    assert numa_cpus(tmp_path) == expected
    assert list(numa_cpus(tmp_path)) == sorted(expected)


def test_without_numa_information_every_online_cpu_is_on_node_0(tmp_path: Path) -> None:
    online = tmp_path / "sys/devices/system/cpu/online"
    online.parent.mkdir(parents=True)
    online.write_text("0-5\n")
    assert numa_cpus(tmp_path) == {0: [0, 1, 2, 3, 4, 5]}


def test_with_nothing_at_all_it_counts_the_cpus(tmp_path: Path) -> None:
    assert numa_cpus(tmp_path) == {0: list(range(os.cpu_count() or 1))}


def test_a_garbled_cpulist_is_ignored(tmp_path: Path) -> None:
    write_numa_nodes(tmp_path, {0: "0-3", 1: "banana"})
    assert numa_cpus(tmp_path) == {0: [0, 1, 2, 3]}


def test_this_machine_has_cpus_on_some_node() -> None:
    found = numa_cpus()
    assert sum(len(cpus) for cpus in found.values()) >= 1


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0", [0]), ("0-2,5", [0, 1, 2, 5]), ("3-3", [3]), ("1,0", [0, 1]), ("0-1,\n", [0, 1])],
)
def test_parse_cpulist(text: str, cpus: list[int]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["3-1", "a", "1-b", "-1"])
def test_parse_cpulist_refuses_nonsense(text: str) -> None:
    with pytest.raises(ValueError, match=r"cpu range|invalid literal"):
        parse_cpulist(text)


@pytest.mark.parametrize(
    ("bus_id", "sysfs"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),  # NVML
        ("0000:3b:00.0", "0000:3b:00.0"),  # sysfs already
        ("3B:00.0", "0000:3b:00.0"),  # no domain
        ("00000001:C4:00.1", "0001:c4:00.1"),
    ],
)
def test_pci_bus_ids_are_normalised(bus_id: str, sysfs: str) -> None:
    assert normalise_pci_bus_id(bus_id) == sysfs


@pytest.mark.parametrize(("content", "node"), [("1\n", 1), ("-1\n", None), (None, None)])
def test_pci_numa_node(tmp_path: Path, content: str | None, node: int | None) -> None:
    directory = tmp_path / "sys/bus/pci/devices/0000:3b:00.0"
    directory.mkdir(parents=True)
    if content is not None:
        (directory / "numa_node").write_text(content)
    assert pci_numa_node(tmp_path, "00000000:3B:00.0") == node


@pytest.mark.parametrize(
    ("content", "value"), [("0x1ae0", 0x1AE0), ("128", 128), ("08", 8), ("-1", -1), ("x", None)]
)
def test_read_int(tmp_path: Path, content: str, value: int | None) -> None:
    (tmp_path / "f").write_text(content + "\n")
    assert read_int(tmp_path / "f") == value
