"""The mock plugin end to end: TOML file -> fingerprint -> reservation -> stats."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from plugins.accelerators.base import Allocation, ReservationError
from plugins.accelerators.mock import MockConfigError, MockPlugin, MockSettings

GIB = 1024**3
D = Decimal

ISSUE_EXAMPLE = """
[[devices]]
kind = "cuda"          # cuda | rocm | tpu
model = "Mock GPU 8GB"
memory = "8GiB"
numa_node = 0
count = 1              # optional, default 1
[cuda]
mode = "fractional"    # "fractional" offers cuda.shares, "discrete" offers cuda.device
shares_per_device = 2.0
quantum = 0.1
"""

MIXED = """
[[devices]]
kind = "cuda"
memory = "16GiB"
count = 2
numa_node = 1
processing_units = 40
utilization = 12.5
memory_used = "1GiB"

[[devices]]
kind = "rocm"
model = "Mock MI210"
memory = "64GiB"

[[devices]]
kind = "tpu"
memory = "32GiB"
count = 4

[[devices]]
kind = "cuda"
memory = "16GiB"
health = "unhealthy"
"""


def _mock(tmp_path: Path, text: str) -> MockPlugin:
    path = tmp_path / "devices.toml"
    path.write_text(text)
    return MockPlugin(MockSettings(devices=path))


def _cuda(tmp_path: Path, **cuda: object) -> MockPlugin:
    lines = "\n".join(
        f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {str(v).lower()}" for k, v in cuda.items()
    )
    return _mock(tmp_path, f'[[devices]]\nkind = "cuda"\nmemory = "8GiB"\n[cuda]\n{lines}\n')


def test_the_example_from_the_issue(tmp_path: Path) -> None:
    fp = _mock(tmp_path, ISSUE_EXAMPLE).fingerprint()
    (device,) = fp.devices
    assert (device.id, device.kind, device.model, device.memory, device.numa_node) == (
        "mock-cuda-0",
        "cuda",
        "Mock GPU 8GB",
        8 * GIB,
        0,
    )
    assert (device.slot, device.capacity, device.health) == ("cuda.shares", D(2), "healthy")
    assert [(s.name, s.quantum, s.unit) for s in fp.slot_types] == [
        ("cuda.shares", D("0.1"), "share")
    ]
    assert fp.enforcement == "none"
    assert fp.plugin == "mock"


def test_scenario_1_half_a_share_of_an_8gb_gpu_is_2gib(tmp_path: Path) -> None:
    res = _mock(tmp_path, ISSUE_EXAMPLE).reserve(
        Allocation("cuda.shares", {"mock-cuda-0": D("0.5")})
    )
    assert res.env == {
        "CUDA_VISIBLE_DEVICES": "mock-cuda-0",
        "NVIDIA_VISIBLE_DEVICES": "mock-cuda-0",
        "JOBGATE_CUDA_SHARES": "0.5",
        "JOBGATE_CUDA_MEMORY_BYTES": str(2 * GIB),
        "JOBGATE_CUDA_MEMORY_BYTES_PER_DEVICE": str(2 * GIB),
        "JOBGATE_CUDA_ENFORCEMENT": "none",
    }
    assert (res.devices, res.cdi_devices, res.mounts) == ([], [], [])


def test_scenario_3_sessions_of_0_4_with_one_share_per_device(tmp_path: Path) -> None:
    plugin = _cuda(tmp_path, mode="fractional", shares_per_device=1)
    res = plugin.reserve(Allocation("cuda.shares", {"mock-cuda-0": D("0.4")}))
    assert res.env["JOBGATE_CUDA_MEMORY_BYTES"] == "3435973836"
    assert res.env["JOBGATE_CUDA_SHARES"] == "0.4"


def test_a_mixed_node(tmp_path: Path) -> None:
    fp = _mock(tmp_path, MIXED).fingerprint()
    assert [(d.id, d.slot, d.health) for d in fp.devices] == [
        ("mock-cuda-0", "cuda.device", "healthy"),
        ("mock-cuda-1", "cuda.device", "healthy"),
        ("mock-rocm-0", "rocm.device", "healthy"),
        ("mock-tpu-0", "tpu.device", "healthy"),
        ("mock-tpu-1", "tpu.device", "healthy"),
        ("mock-tpu-2", "tpu.device", "healthy"),
        ("mock-tpu-3", "tpu.device", "healthy"),
        ("mock-cuda-2", "cuda.device", "unhealthy"),
    ]
    assert [s.name for s in fp.slot_types] == ["cuda.device", "rocm.device", "tpu.device"]
    assert fp.enforcement is None  # discrete cuda: nothing to enforce
    assert fp.detail.endswith("3 cuda, 1 rocm, 4 tpu")
    assert fp.devices[2].model == "Mock MI210"
    assert fp.devices[3].model == "Mock TPU"
    assert fp.devices[7].attributes["health_reason"].startswith("marked unhealthy in ")


def test_mixed_reservations(tmp_path: Path) -> None:
    plugin = _mock(tmp_path, MIXED)
    cuda = plugin.reserve(Allocation("cuda.device", {"mock-cuda-1": D(1), "mock-cuda-0": D(1)}))
    assert cuda.env["CUDA_VISIBLE_DEVICES"] == "mock-cuda-0,mock-cuda-1"
    assert cuda.env["JOBGATE_CUDA_ENFORCEMENT"] == "exclusive"
    assert cuda.env["JOBGATE_CUDA_MEMORY_BYTES"] == str(16 * GIB)
    rocm = plugin.reserve(Allocation("rocm.device", {"mock-rocm-0": D(1)}))
    assert rocm.env == {"ROCR_VISIBLE_DEVICES": "mock-rocm-0", "HIP_VISIBLE_DEVICES": "0"}
    tpu = plugin.reserve(Allocation("tpu.device", {"mock-tpu-2": D(1), "mock-tpu-3": D(1)}))
    assert tpu.env["TPU_VISIBLE_CHIPS"] == "2,3"
    assert tpu.env["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,2,1"
    assert all(r.devices == [] and r.mounts == [] for r in (cuda, rocm, tpu))
    with pytest.raises(ReservationError, match="mock-cuda-2 is unhealthy"):
        plugin.reserve(Allocation("cuda.device", {"mock-cuda-2": D(1)}))


@pytest.mark.parametrize(
    ("enforcement", "present", "absent"),
    [
        (
            "mps",
            {
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2048M",
            },
            ["CUDA_MPS_PIPE_DIRECTORY", "LD_PRELOAD"],
        ),
        (
            "preload",
            {"CUDA_DEVICE_SM_LIMIT": "25", "CUDA_DEVICE_MEMORY_LIMIT_0": "2048m"},
            ["LD_PRELOAD", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"],
        ),
        ("none", {}, ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_DEVICE_SM_LIMIT", "LD_PRELOAD"]),
    ],
)
def test_claimed_enforcement_shows_in_the_env(
    tmp_path: Path, enforcement: str, present: dict[str, str], absent: list[str]
) -> None:
    plugin = _cuda(tmp_path, mode="fractional", shares_per_device=2, enforcement=enforcement)
    assert plugin.fingerprint().enforcement == enforcement
    res = plugin.reserve(Allocation("cuda.shares", {"mock-cuda-0": D("0.5")}))
    assert res.env["JOBGATE_CUDA_ENFORCEMENT"] == enforcement
    assert {k: res.env[k] for k in present} == present
    assert not set(absent) & set(res.env)


def test_refusing_unenforced_fractions_works_on_mocks_too(tmp_path: Path) -> None:
    plugin = _cuda(
        tmp_path, mode="fractional", shares_per_device=2, allow_unenforced_fractions=False
    )
    assert plugin.fingerprint().slot_types[0].quantum == D(2)
    with pytest.raises(ReservationError, match="no fraction enforcement"):
        plugin.reserve(Allocation("cuda.shares", {"mock-cuda-0": D("0.5")}))
    assert plugin.reserve(Allocation("cuda.shares", {"mock-cuda-0": D(2)})).env[
        "JOBGATE_CUDA_MEMORY_BYTES"
    ] == str(8 * GIB)


def test_stats_come_from_the_file(tmp_path: Path) -> None:
    stats = {s.device_id: s for s in _mock(tmp_path, MIXED).stats()}
    assert len(stats) == 8
    first = stats["mock-cuda-0"]
    assert (first.utilization, first.memory_used, first.memory_total) == (12.5, GIB, 16 * GIB)
    assert (stats["mock-tpu-0"].utilization, stats["mock-tpu-0"].memory_used) == (0.0, 0)


def test_the_file_is_named_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "from-env.toml"
    path.write_text(ISSUE_EXAMPLE)
    monkeypatch.setenv("JOBGATE_MOCK_DEVICES", str(path))
    assert [d.id for d in MockPlugin().fingerprint().devices] == ["mock-cuda-0"]


def test_without_a_file_the_error_says_what_to_set() -> None:
    with pytest.raises(MockConfigError, match="JOBGATE_MOCK_DEVICES is not set"):
        MockPlugin(MockSettings())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param('[[devices]\nkind = "cuda"', "not valid TOML", id="broken-toml"),
        pytest.param(
            '[[devices]]\nkind = "fpga"\nmemory = "1g"',
            "devices.0.kind: Input should be 'cuda', 'rocm' or 'tpu'",
            id="unknown-kind",
        ),
        pytest.param(
            '[[devices]]\nkind = "cuda"', "devices.0.memory: Field required", id="no-memory"
        ),
        pytest.param(
            '[[devices]]\nkind = "cuda"\nmemory = "8 gigs"',
            "devices.0.memory: Value error, not a size",
            id="bad-size",
        ),
        pytest.param(
            '[[devices]]\nkind = "cuda"\nmemory = "8g"\ncount = 0',
            "devices.0.count: Input should be greater than or equal to 1",
            id="zero-count",
        ),
        pytest.param(
            "[cuda]\nshares_per_devce = 2",
            "cuda.shares_per_devce: Extra inputs are not permitted",
            id="typo",
        ),
        pytest.param(
            "[cuda]\nshares_per_device = 1\nquantum = 0.3",
            "must be a multiple of quantum",
            id="quantum",
        ),
        pytest.param(
            '[cuda]\nenforcement = "magic"',
            "cuda.enforcement: Input should be 'mps', 'preload' or 'none'",
            id="enforcement",
        ),
    ],
)
def test_bad_files_are_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(MockConfigError, match=r"mock devices file .*devices\.toml: ") as caught:
        _mock(tmp_path, text)
    assert message in str(caught.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MockConfigError, match=r"nope\.toml: No such file or directory"):
        MockPlugin(MockSettings(devices=tmp_path / "nope.toml"))


def test_an_empty_file_is_a_node_without_accelerators(tmp_path: Path) -> None:
    fp = _mock(tmp_path, "").fingerprint()
    assert (fp.devices, fp.slot_types, fp.enforcement) == ([], [], None)
    assert fp.detail.endswith(": none")
