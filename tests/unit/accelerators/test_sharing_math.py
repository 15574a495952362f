"""Fraction arithmetic: memory and SM entitlement, and what a session is told."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from plugins.accelerators.base import Allocation, Device
from plugins.accelerators.checks import plain
from plugins.accelerators.sharing import (
    SharingFields,
    grants_for,
    mps_env,
    preload_env,
    session_env,
)

GIB = 1024**3
D = Decimal


def _device(device_id: str, memory: int, capacity: Decimal) -> Device:
    return Device(device_id, "cuda", "GPU", memory, 80, 0, "cuda.shares", capacity)


@pytest.mark.parametrize(
    ("memory", "shares_per_device", "amount", "memory_bytes", "threads", "mib"),
    [
        # scenario 1: one 8 GB GPU, 2 shares per device (1 fGPU = half a GPU), 0.5 fGPU
        pytest.param(8 * GIB, "2", "0.5", 2 * GIB, 25, 2048, id="scenario-1-quarter-gpu"),
        pytest.param(8 * GIB, "2", "2", 8 * GIB, 100, 8192, id="two-shares-is-the-whole-gpu"),
        # scenario 3: 1 share per device, sessions of 0.4
        pytest.param(8 * GIB, "1", "0.4", 3435973836, 40, 3276, id="scenario-3-forty-percent"),
        pytest.param(8 * GIB, "3", "1", 2863311530, 33, 2730, id="thirds-round-down-bytes"),
        pytest.param(8 * GIB, "1", "0.005", 42949672, 1, 40, id="tiny-share-gets-one-percent"),
        pytest.param(80 * GIB, "4", "0.1", 2147483648, 3, 2048, id="h100-tenth-of-a-quarter"),
        pytest.param(24 * GIB, "1", "0.125", 3 * GIB, 13, 3072, id="half-rounds-up"),
    ],
)
def test_entitlement(
    memory: int,
    shares_per_device: str,
    amount: str,
    memory_bytes: int,
    threads: int,
    mib: int,
) -> None:
    device = _device("GPU-a", memory, D(shares_per_device))
    (grant,) = grants_for(
        Allocation("cuda.shares", {"GPU-a": D(amount)}), {"GPU-a": device}, D(shares_per_device)
    )
    assert (grant.memory_bytes, grant.thread_percentage, grant.memory_mib) == (
        memory_bytes,
        threads,
        mib,
    )
    env = session_env([grant], "cuda.shares", "none")
    assert env["JOBGATE_CUDA_MEMORY_BYTES"] == str(memory_bytes)
    assert env["JOBGATE_CUDA_SHARES"] == plain(D(amount))


def test_several_devices_total_shares_and_smallest_memory() -> None:
    devices = {"GPU-a": _device("GPU-a", 8 * GIB, D(1)), "GPU-b": _device("GPU-b", 16 * GIB, D(1))}
    grants = grants_for(
        Allocation("cuda.shares", {"GPU-b": D("0.8"), "GPU-a": D("0.8")}),
        devices,
        D(1),
        order=["GPU-a", "GPU-b"],
    )
    env = session_env(grants, "cuda.shares", "mps")
    assert env == {
        "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b",
        "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b",
        "JOBGATE_CUDA_SHARES": "1.6",
        "JOBGATE_CUDA_MEMORY_BYTES": "6871947673",
        "JOBGATE_CUDA_MEMORY_BYTES_PER_DEVICE": "6871947673,13743895347",
        "JOBGATE_CUDA_ENFORCEMENT": "mps",
    }
    assert mps_env(grants) == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "80",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=6553M,1=13107M",
    }
    assert preload_env(grants) == {
        "CUDA_DEVICE_SM_LIMIT": "80",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "6553m",
        "CUDA_DEVICE_MEMORY_LIMIT_1": "13107m",
    }


def test_uneven_shares_limit_threads_by_the_smallest() -> None:
    devices = {"a": _device("a", 8 * GIB, D(2)), "b": _device("b", 8 * GIB, D(2))}
    grants = grants_for(Allocation("cuda.shares", {"a": D(2), "b": D("0.5")}), devices, D(2))
    assert mps_env(grants)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert mps_env(grants)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M,1=2048M"


def test_whole_devices_are_exclusive_and_count_as_one_each() -> None:
    device = Device("GPU-a", "cuda", "GPU", 8 * GIB, 80, 0, "cuda.device", D(1))
    grants = grants_for(Allocation("cuda.device", {"GPU-a": D(1)}), {"GPU-a": device}, D(4))
    env = session_env(grants, "cuda.device", None)
    assert (env["JOBGATE_CUDA_SHARES"], env["JOBGATE_CUDA_MEMORY_BYTES"]) == ("1", str(8 * GIB))
    assert env["JOBGATE_CUDA_ENFORCEMENT"] == "exclusive"


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"shares_per_device": "1", "quantum": "0.3"}, "must be a multiple of quantum"),
        ({"shares_per_device": "0"}, "greater than 0"),
        ({"quantum": "-0.1"}, "greater than 0"),
        ({"mode": "half"}, "'fractional' or 'discrete'"),
    ],
)
def test_bad_sharing_settings(fields: dict[str, str], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        SharingFields.model_validate(fields)


@pytest.mark.parametrize(
    ("value", "text"),
    [("0.50", "0.5"), ("2.0", "2"), ("1E+1", "10"), ("0.125", "0.125"), ("1.60", "1.6")],
)
def test_plain_decimals(value: str, text: str) -> None:
    assert plain(D(value)) == text
