"""Accelerators through the real stack: mock GPUs, the planner, the applier, the worker.

Gateway (HTTP), scheduler, PostgreSQL and Redis are real; workers run the ``process``
runtime with the ``mock`` accelerator plugin, so each session is a real process that
prints the environment its reservation gave it. What is checked is what a user sees:
which devices and cpus a session got (``GET /v1/sessions/{id}`` and ``jobgate sessions
show``), what its program sees, why it waits, and the node's free capacity and device
stats (``GET /v1/nodes/{id}``, ``jobgate nodes show``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from harness import TERMINAL, Stack
from waiting import until

from plugins.accelerators.fake_sysfs import write_numa_nodes

GiB = 1024**3
PRINT_ENV = ["sh", "-c", "env | grep -E '^(CUDA|JOBGATE_CUDA)' | sort"]
HOLD = ["sleep", "300"]


@pytest.fixture(autouse=True)
async def stop_leftovers(stack: Stack) -> AsyncIterator[None]:
    """Stop whatever a test left running (a failed one too) before its stack goes.

    The process runtime leaves sessions running when their worker stops, so that a
    restarted worker can re-attach; a test must not leave them behind.
    """
    yield
    async with stack.client() as api:
        items = (await api.get("/v1/sessions", params={"all": True, "limit": 500})).json()
        live = [s["id"] for s in items["items"] if s["status"] not in TERMINAL]
        for session_id in live:
            await api.delete(f"/v1/sessions/{session_id}", params={"force": True})
    for session_id in live:
        with contextlib.suppress(AssertionError):
            await stack.wait_status(session_id, TERMINAL, timeout=15)


def mock_devices(tmp_path: Path, devices: list[dict[str, Any]], **cuda: Any) -> Path:
    """A ``JOBGATE_MOCK_DEVICES`` file with *devices* and a ``[cuda]`` section."""
    path = tmp_path / "mock-devices.toml"
    path.write_text(tomli_w.dumps({"devices": devices, "cuda": cuda}))
    return path


async def mock_worker(
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    devices: Path,
    *,
    allow_unenforced: bool = True,
    **overrides: Any,
) -> None:
    """An in-process worker ``n1`` whose only accelerator plugin is ``mock``.

    Unenforced fractions are allowed, as ``jobgate up`` does with mock devices, unless
    the test is about that very setting.
    """
    stack.settings.allow_unenforced_fractions = allow_unenforced
    monkeypatch.setenv("JOBGATE_MOCK_DEVICES", str(devices))
    await stack.start_worker("n1", accelerators=["mock"], **overrides)


def env_lines(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


async def node(stack: Stack, node_id: str = "n1") -> dict[str, Any]:
    async with stack.client() as api:
        r = await api.get(f"/v1/nodes/{node_id}")
        assert r.status_code == 200, r.text
        found: dict[str, Any] = r.json()
        return found


async def wait_reason(stack: Stack, session_id: str, says: str, timeout: float = 30.0) -> str:
    """The pending reason of a session that still waits, once it *says* something."""

    async def reason() -> str | None:
        session = await stack.get(session_id)
        assert session["status"] == "PENDING", session
        said: str = session["pending_reason"] or ""
        return said if says in said else None

    return await until(reason, timeout=timeout, what=f"{session_id} waits because {says!r}")


def devices_of(session: dict[str, Any]) -> dict[str, dict[str, str]]:
    (kernel,) = session["kernels"]
    devices: dict[str, dict[str, str]] = kernel["devices"]
    return devices


# -- placement ------------------------------------------------------------------------
async def test_request_larger_than_one_device_is_split_evenly_over_the_fewest(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    devices = mock_devices(
        tmp_path,
        [{"kind": "cuda", "memory": "8GiB", "count": 3}],
        mode="fractional",
        shares_per_device=1,
        quantum=0.01,
    )
    await mock_worker(stack, monkeypatch, devices)
    s = await stack.submit(command=PRINT_ENV, resources={"cpu": "0.1", "cuda.shares": "1.5"})
    done = await stack.wait_status(s["id"], {"SUCCEEDED"})
    assert devices_of(done) == {"cuda.shares": {"mock-cuda-0": "0.75", "mock-cuda-1": "0.75"}}
    seen = env_lines(await stack.logs(s["id"]))
    assert seen["CUDA_VISIBLE_DEVICES"] == "mock-cuda-0,mock-cuda-1"
    assert seen["JOBGATE_CUDA_SHARES"] == "1.5"
    three_quarters = str(int(0.75 * 8 * GiB))
    assert seen["JOBGATE_CUDA_MEMORY_BYTES"] == three_quarters
    assert seen["JOBGATE_CUDA_MEMORY_BYTES_PER_DEVICE"] == f"{three_quarters},{three_quarters}"


async def test_whole_device_slots_hand_out_free_devices_only(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    devices = mock_devices(tmp_path, [{"kind": "cuda", "memory": "16GiB", "count": 3}])
    await mock_worker(stack, monkeypatch, devices)
    assert (await node(stack))["capacity"]["cuda.device"] == "3"

    two = await stack.submit(command=PRINT_ENV, resources={"cpu": "0.1", "cuda.device": "2"})
    done = await stack.wait_status(two["id"], {"SUCCEEDED"})
    assert devices_of(done) == {"cuda.device": {"mock-cuda-0": "1", "mock-cuda-1": "1"}}
    seen = env_lines(await stack.logs(two["id"]))
    assert seen["CUDA_VISIBLE_DEVICES"] == "mock-cuda-0,mock-cuda-1"
    assert seen["JOBGATE_CUDA_ENFORCEMENT"] == "exclusive"
    assert seen["JOBGATE_CUDA_MEMORY_BYTES"] == str(16 * GiB)

    held = await stack.submit(command=HOLD, resources={"cpu": "0.1", "cuda.device": "2"})
    await stack.wait_status(held["id"], {"RUNNING"})
    async with stack.client() as api:  # never placeable: refused at submit, not queued
        part = await api.post(
            "/v1/sessions", json={"command": HOLD, "resources": {"cuda.device": "0.5"}}
        )
    assert part.status_code == 422
    assert part.json()["field"] == "resources.cuda.device"
    assert "not a multiple of the device quantum (1)" in part.json()["detail"]
    blocked = await stack.submit(command=HOLD, resources={"cpu": "0.1", "cuda.device": "2"})
    await wait_reason(stack, blocked["id"], "lacks cuda.device (largest free 1)")
    async with stack.client() as api:
        for s in (held, blocked):
            await api.delete(f"/v1/sessions/{s['id']}")


async def test_cpus_are_pinned_on_the_numa_node_of_the_gpu(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sysfs = tmp_path / "sysfs"
    write_numa_nodes(sysfs, {0: "0-1", 1: "2-3"})
    devices = mock_devices(
        tmp_path,
        [{"kind": "cuda", "memory": "8GiB", "numa_node": 1}],
        mode="fractional",
        shares_per_device=2,
    )
    await mock_worker(stack, monkeypatch, devices, numa_sysfs_root=sysfs)

    first = await stack.submit(command=HOLD, resources={"cpu": "2", "cuda.shares": "0.5"})
    running = await stack.wait_status(first["id"], {"RUNNING"})
    (kernel,) = running["kernels"]
    assert kernel["devices"] == {"cuda.shares": {"mock-cuda-0": "0.5"}}
    assert kernel["cpuset"] == [2, 3]
    shown = await stack.cli("sessions", "show", first["id"])
    assert "devices cuda.shares: mock-cuda-0=0.5 | cpus 2,3" in shown

    # NUMA node 1 has no cpu left: the next session runs, unpinned, rather than waiting
    second = await stack.submit(command=HOLD, resources={"cpu": "1", "cuda.shares": "0.5"})
    (kernel,) = (await stack.wait_status(second["id"], {"RUNNING"}))["kernels"]
    assert kernel["cpuset"] is None
    assert "cpus" not in await stack.cli("sessions", "show", second["id"])
    async with stack.client() as api:
        for s in (first, second):
            await api.delete(f"/v1/sessions/{s['id']}")


# -- fraction enforcement ---------------------------------------------------------------
async def test_unenforced_fractions_wait_with_a_reason_until_allowed(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    devices = mock_devices(
        tmp_path,
        [{"kind": "cuda", "memory": "8GiB"}],
        mode="fractional",
        shares_per_device=2,
        enforcement="none",
    )
    await mock_worker(stack, monkeypatch, devices, allow_unenforced=False)
    assert (await node(stack))["fraction_enforcement"] == "none"
    s = await stack.submit(command=PRINT_ENV, resources={"cpu": "0.1", "cuda.shares": "0.5"})
    reason = await wait_reason(stack, s["id"], "without fraction enforcement")
    assert reason == "no node fits: 1 node without fraction enforcement"
    shown = await stack.cli("sessions", "show", s["id"])
    assert "without fraction enforcement" in shown

    stack.settings.allow_unenforced_fractions = True  # the operator allows them
    await stack.wait_status(s["id"], {"SUCCEEDED"})
    assert env_lines(await stack.logs(s["id"]))["JOBGATE_CUDA_ENFORCEMENT"] == "none"


async def test_a_node_that_enforces_fractions_takes_them_when_unenforced_are_not_allowed(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    devices = mock_devices(
        tmp_path,
        [{"kind": "cuda", "memory": "8GiB"}],
        mode="fractional",
        shares_per_device=2,
        enforcement="mps",
    )
    await mock_worker(stack, monkeypatch, devices, allow_unenforced=False)
    s = await stack.submit(command=PRINT_ENV, resources={"cpu": "0.1", "cuda.shares": "0.5"})
    await stack.wait_status(s["id"], {"SUCCEEDED"})
    seen = env_lines(await stack.logs(s["id"]))
    assert seen["JOBGATE_CUDA_ENFORCEMENT"] == "mps"
    assert seen["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert seen["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2048M"


# -- worker restart -----------------------------------------------------------------------
async def test_allocation_survives_a_killed_worker_and_the_reattached_kernel_reports_its_end(
    stack: Stack, tmp_path: Path
) -> None:
    devices = mock_devices(
        tmp_path,
        [{"kind": "cuda", "memory": "8GiB"}],
        mode="fractional",
        shares_per_device=1,
    )
    env = {"JOBGATE_ACCELERATORS": "mock", "JOBGATE_MOCK_DEVICES": str(devices)}
    stack.settings.allow_unenforced_fractions = True
    release = tmp_path / "release"
    # exits 3 once the test touches *release* (or 9 after a minute, should the test fail)
    wait_then_fail = (
        f"echo started; for i in $(seq 600); do [ -e {release} ] && exit 3; sleep 0.1; done; exit 9"
    )

    worker = await stack.start_worker_process(**env)
    a = await stack.submit(
        command=["sh", "-c", wait_then_fail], resources={"cpu": "0.1", "cuda.shares": "0.6"}
    )
    await stack.wait_output(a["id"], "started")
    assert (await node(stack))["free"]["cuda.shares"] == "0.4"

    await worker.kill9()
    assert (await node(stack))["free"]["cuda.shares"] == "0.4"
    await stack.start_worker_process(**env)
    after = await node(stack)
    assert after["free"]["cuda.shares"] == "0.4"
    assert after["occupied"]["cuda.shares"] == "0.6"
    assert (await stack.get(a["id"]))["status"] == "RUNNING"

    # the re-attached kernel still holds its 0.6: a second 0.6 cannot over-commit the GPU
    b = await stack.submit(command=HOLD, resources={"cpu": "0.1", "cuda.shares": "0.6"})
    await wait_reason(stack, b["id"], "lacks cuda.shares (largest free 0.4)")

    release.touch()
    ended = await stack.wait_status(a["id"], {"FAILED"})
    assert ended["exit_code"] == 3
    assert (await stack.logs(a["id"])) == "started\n"
    running = await stack.wait_status(b["id"], {"RUNNING"})  # a's share came back
    assert devices_of(running) == {"cuda.shares": {"mock-cuda-0": "0.6"}}
    assert (await node(stack))["free"]["cuda.shares"] == "0.4"
    async with stack.client() as api:
        await api.delete(f"/v1/sessions/{b['id']}")
    await stack.wait_status(b["id"], {"TERMINATED"})
    assert (await node(stack))["free"]["cuda.shares"] == "1"


# -- device stats -----------------------------------------------------------------------
async def test_device_stats_from_the_heartbeat_in_the_api_and_the_cli(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    devices = mock_devices(
        tmp_path,
        [
            {
                "kind": "cuda",
                "model": "Mock A",
                "memory": "8GiB",
                "numa_node": 0,
                "utilization": 42,
                "memory_used": "3GiB",
            },
            {"kind": "cuda", "model": "Mock B", "memory": "16GiB", "numa_node": 1},
        ],
    )
    await mock_worker(stack, monkeypatch, devices)

    async def with_stats() -> dict[str, Any] | None:
        shown = await node(stack)
        return shown if shown["stats"] else None

    shown = await until(with_stats, timeout=30, interval=0.1, what="the node shows device stats")
    assert shown["stats"] == [
        {
            "device_id": "mock-cuda-0",
            "utilization": 42.0,
            "memory_used": 3 * GiB,
            "memory_total": 8 * GiB,
        },
        {
            "device_id": "mock-cuda-1",
            "utilization": 0.0,
            "memory_used": 0,
            "memory_total": 16 * GiB,
        },
    ]
    text = await stack.cli("nodes", "show", "n1")
    assert "bind_mounts           no" in text  # the process runtime's worker
    assert "device mock-cuda-0: Mock A 8GiB numa 0 cuda.device=1 healthy | util 42% mem 3GiB" in (
        text
    )
    assert "device mock-cuda-1: Mock B 16GiB numa 1 cuda.device=1 healthy | util 0% mem 0B" in (
        text
    )
