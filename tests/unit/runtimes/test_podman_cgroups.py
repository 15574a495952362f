"""Cgroup mode detection on fake /sys trees, limit computation and v1 limit writing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from plugins.resources import ResourceSlots
from plugins.runtimes.podman.cgroups import (
    LimitError,
    Limits,
    apply_v1,
    compute_limits,
    cpuset_text,
    detect,
    oom_kill_file,
    oom_kills,
    parse_proc_cgroup,
    v1_writes,
)

HYBRID_IN_PARENT = """\
9:name=systemd:/
8:pids:/jobgate
7:blkio:/
4:memory:/jobgate
3:cpuset:/jobgate
2:cpuacct:/
1:cpu:/jobgate
0::/
"""
HYBRID_AT_ROOT = HYBRID_IN_PARENT.replace("/jobgate", "/")
HYBRID_NO_CPUSET = HYBRID_IN_PARENT.replace("3:cpuset:/jobgate", "3:cpuset:/")
COMOUNTED = "5:memory:/jobgate\n4:pids:/jobgate\n3:cpu,cpuacct:/jobgate\n0::/\n"


def v1_tree(root: Path, *, mounts: tuple[str, ...] = ("memory", "cpu", "pids", "cpuset")) -> Path:
    for mount in mounts:
        (root / mount / "jobgate").mkdir(parents=True)
    return root


def v2_tree(root: Path, service: str, controllers: str) -> Path:
    (root / service.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / service.lstrip("/") / "cgroup.controllers").write_text(controllers + "\n")
    return root


@dataclass
class DetectCase:
    name: str
    tree: str  # "hybrid", "comounted", "v2"
    service: str | None
    mode: str
    enforced: bool
    detail: str
    cpuset: bool = False
    v2_controllers: str = "cpu memory pids"
    mounts: tuple[str, ...] = field(default=("memory", "cpu", "pids", "cpuset"))


DETECT_CASES = [
    DetectCase(
        "hybrid, service in the delegated parent",
        "hybrid",
        HYBRID_IN_PARENT,
        "v1-delegated",
        True,
        "below /jobgate (memory, cpu, pids, cpuset)",
        cpuset=True,
    ),
    DetectCase(
        "hybrid, cpuset not delegated",
        "hybrid",
        HYBRID_NO_CPUSET,
        "v1-delegated",
        True,
        "(memory, cpu, pids)",
        cpuset=False,
    ),
    DetectCase(
        "hybrid, service started outside the parent",
        "hybrid",
        HYBRID_AT_ROOT,
        "v1-none",
        False,
        "runs in memory:/, not below /jobgate",
    ),
    DetectCase(
        "hybrid, service unknown (tcp socket)",
        "hybrid",
        None,
        "v1-none",
        False,
        "cannot tell where the Podman service runs",
    ),
    DetectCase(
        "hybrid, parent directory missing",
        "hybrid",
        HYBRID_IN_PARENT,
        "v1-none",
        False,
        "is not writable",
        mounts=("cpu", "pids", "cpuset"),
    ),
    DetectCase(
        "co-mounted cpu,cpuacct",
        "comounted",
        COMOUNTED,
        "v1-delegated",
        True,
        "(memory, cpu, pids)",
    ),
    DetectCase(
        "v2 with controllers delegated",
        "v2",
        "0::/user/podman\n",
        "v2",
        True,
        "enforced by Podman in /user/podman",
        cpuset=True,
    ),
    DetectCase(
        "v2 without memory and pids",
        "v2",
        "0::/user/podman\n",
        "v2",
        False,
        "memory, pids not delegated",
        v2_controllers="cpu",
    ),
]


@pytest.mark.parametrize("case", DETECT_CASES, ids=lambda c: c.name)
def test_detect(tmp_path: Path, case: DetectCase) -> None:
    if case.tree == "v2":
        root = v2_tree(tmp_path, "/user/podman", case.v2_controllers)
    elif case.tree == "comounted":
        for mount in ("memory", "pids", "cpu,cpuacct"):
            (tmp_path / mount / "jobgate").mkdir(parents=True)
        root = tmp_path
    else:
        root = v1_tree(tmp_path, mounts=case.mounts)
    support = detect(root, case.service, "jobgate")
    assert (support.mode, support.enforced, support.cpuset) == (
        case.mode,
        case.enforced,
        case.cpuset,
    )
    assert case.detail in support.detail


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("4:memory:/jobgate/abc\n", {"memory": "/jobgate/abc"}, id="one"),
        pytest.param("3:cpu,cpuacct:/x\n", {"cpu": "/x", "cpuacct": "/x"}, id="co-mounted"),
        pytest.param("0::/user.slice\n", {"": "/user.slice"}, id="v2"),
        pytest.param("9:name=systemd:/\n", {"name=systemd": "/"}, id="named"),
        pytest.param("garbage\n\n", {}, id="junk"),
    ],
)
def test_parse_proc_cgroup(text: str, expected: dict[str, str]) -> None:
    assert parse_proc_cgroup(text) == expected


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        pytest.param([0], "0", id="one"),
        pytest.param([0, 1, 2, 5], "0-2,5", id="range-and-single"),
        pytest.param([7, 3, 4, 3], "3-4,7", id="unsorted-with-duplicates"),
    ],
)
def test_cpuset_text(cpus: list[int], text: str) -> None:
    assert cpuset_text(cpus) == text


@pytest.mark.parametrize(
    ("slots", "pids", "cpuset", "expected"),
    [
        pytest.param({}, None, None, Limits(), id="nothing"),
        pytest.param({"cpu": "0.5"}, None, None, Limits(cpu_quota=50_000), id="half-core"),
        pytest.param({"cpu": "2"}, None, None, Limits(cpu_quota=200_000), id="two-cores"),
        pytest.param({"cpu": "0.001"}, None, None, Limits(cpu_quota=1_000), id="kernel-minimum"),
        pytest.param({"cpu": "0.33333"}, None, None, Limits(cpu_quota=33_333), id="rounded-up"),
        pytest.param({"mem": "64m"}, 100, None, Limits(memory=64 << 20, pids=100), id="mem-pids"),
        pytest.param({}, None, [2, 3], Limits(cpuset="2-3"), id="pinned"),
    ],
)
def test_compute_limits(
    slots: dict[str, str], pids: int | None, cpuset: list[int] | None, expected: Limits
) -> None:
    assert compute_limits(ResourceSlots.parse(slots), pids, cpuset) == expected


@pytest.mark.parametrize(
    ("slots", "pids", "cpuset", "message"),
    [
        pytest.param({"mem": "1m"}, None, None, "below the minimum 6MiB", id="tiny-memory"),
        pytest.param({}, 0, None, "pids limit must be at least 1", id="zero-pids"),
        pytest.param({}, None, [], "not a cpu set", id="empty-cpuset"),
        pytest.param({}, None, [-1], "not a cpu set", id="negative-cpu"),
    ],
)
def test_impossible_limits_are_refused(
    slots: dict[str, str], pids: int | None, cpuset: list[int] | None, message: str
) -> None:
    with pytest.raises(LimitError, match=message):
        compute_limits(ResourceSlots.parse(slots), pids, cpuset)


def test_native_limits_for_podman_close_swap() -> None:
    limits = Limits(memory=64 << 20, cpu_quota=50_000, pids=10, cpuset="0")
    assert limits.podman_resource_limits() == {
        "memory": {"limit": 64 << 20, "swap": 64 << 20},
        "cpu": {"quota": 50_000, "period": 100_000, "cpus": "0"},
        "pids": {"limit": 10},
    }
    assert Limits().podman_resource_limits() == {}


def test_v1_writes_memory_before_memsw() -> None:
    assert v1_writes(Limits(memory=67108864, cpu_quota=50_000, pids=5)) == [
        ("memory", "memory.limit_in_bytes", "67108864"),
        ("memory", "memory.memsw.limit_in_bytes", "67108864"),
        ("cpu", "cpu.cfs_period_us", "100000"),
        ("cpu", "cpu.cfs_quota_us", "50000"),
        ("pids", "pids.max", "5"),
    ]


CONTAINER = HYBRID_IN_PARENT.replace("/jobgate", "/jobgate/c0ffee")


def container_tree(root: Path, *, memsw: bool) -> Path:
    for mount, files in {
        "memory": ["memory.limit_in_bytes"] + (["memory.memsw.limit_in_bytes"] if memsw else []),
        "cpu": ["cpu.cfs_period_us", "cpu.cfs_quota_us"],
        "pids": ["pids.max"],
        "cpuset": ["cpuset.cpus"],
    }.items():
        directory = root / mount / "jobgate" / "c0ffee"
        directory.mkdir(parents=True)
        for name in files:
            (directory / name).write_text("max\n")
    return root


def test_apply_v1_writes_into_the_containers_cgroup(tmp_path: Path) -> None:
    root = container_tree(tmp_path, memsw=True)
    apply_v1(
        root, CONTAINER, "jobgate", Limits(memory=8 << 20, cpu_quota=25_000, pids=7, cpuset="1")
    )
    written = {
        str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()
    }
    assert written == {
        "cpu/jobgate/c0ffee/cpu.cfs_period_us": "100000",
        "cpu/jobgate/c0ffee/cpu.cfs_quota_us": "25000",
        "cpuset/jobgate/c0ffee/cpuset.cpus": "1",
        "memory/jobgate/c0ffee/memory.limit_in_bytes": str(8 << 20),
        "memory/jobgate/c0ffee/memory.memsw.limit_in_bytes": str(8 << 20),
        "pids/jobgate/c0ffee/pids.max": "7",
    }


def test_apply_v1_without_swap_accounting(tmp_path: Path) -> None:
    root = container_tree(tmp_path, memsw=False)
    apply_v1(root, CONTAINER, "jobgate", Limits(memory=8 << 20))
    assert (root / "memory/jobgate/c0ffee/memory.limit_in_bytes").read_text() == str(8 << 20)
    assert not (root / "memory/jobgate/c0ffee/memory.memsw.limit_in_bytes").exists()


@pytest.mark.parametrize(
    "cgroup",
    [
        pytest.param(HYBRID_IN_PARENT, id="the-parent-itself"),
        pytest.param(HYBRID_AT_ROOT, id="the-root"),
        pytest.param(CONTAINER.replace("/jobgate/", "/other/"), id="another-tree"),
    ],
)
def test_apply_v1_refuses_a_container_outside_the_parent(tmp_path: Path, cgroup: str) -> None:
    root = container_tree(tmp_path, memsw=False)
    (root / "memory" / "memory.limit_in_bytes").write_text("max\n")
    with pytest.raises(OSError, match="not below /jobgate/"):
        apply_v1(root, cgroup, "jobgate", Limits(memory=8 << 20))
    assert (root / "memory" / "memory.limit_in_bytes").read_text() == "max\n"


def test_oom_kills_are_read_from_the_containers_own_memory_cgroup(tmp_path: Path) -> None:
    """v1 (also on hybrid hosts): memory.oom_control; v2: memory.events; gone: None."""
    counter = oom_kill_file(tmp_path, CONTAINER)
    assert counter == tmp_path / "memory/jobgate/c0ffee/memory.oom_control"
    assert oom_kills(counter) is None  # the cgroup is gone
    counter.parent.mkdir(parents=True)
    counter.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    assert oom_kills(counter) == 0
    counter.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert oom_kills(counter) == 2

    v2 = oom_kill_file(tmp_path, "0::/user.slice/libpod-c0ffee.scope/container\n")
    assert v2 == tmp_path / "user.slice/libpod-c0ffee.scope/container/memory.events"
    v2.parent.mkdir(parents=True)
    v2.write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n")
    assert oom_kills(v2) == 1
    assert oom_kill_file(tmp_path, "garbage") is None
