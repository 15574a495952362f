"""The cuda plugin's fingerprint and stats against fake NVML tables."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from plugins.accelerators.cuda import CudaPlugin, CudaSettings
from plugins.accelerators.fake_nvml import FakeNvml, FakeTable

GIB = 1024**3
MakeCuda = Callable[..., CudaPlugin]
MakeGpu = Callable[..., dict[str, Any]]

MIG_1G: dict[str, Any] = {
    "uuid": "MIG-11111111-aaaa-bbbb-cccc-000000000001",
    "name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
    "memory": "4864MiB",
    "multiprocessors": 14,
    "gpu_instance_id": 13,
    "compute_instance_id": 0,
}
MIG_3G: dict[str, Any] = {
    "uuid": "MIG-11111111-aaaa-bbbb-cccc-000000000002",
    "name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
    "memory": "19968MiB",
    "multiprocessors": 42,
    "gpu_instance_id": 2,
    "compute_instance_id": 0,
}


def _summary(plugin: CudaPlugin) -> tuple[list[tuple[Any, ...]], str]:
    fp = plugin.fingerprint()
    rows = [(d.id[:12], d.memory, d.processing_units, d.numa_node, d.health) for d in fp.devices]
    return rows, fp.detail


@pytest.mark.parametrize(
    ("rows", "options", "expected", "detail"),
    [
        pytest.param(
            [0],
            {},
            [("GPU-00000000", 40 * GIB, 108, None, "healthy")],
            "driver 550.54.15; 1 devices",
            id="one-gpu-numa-unknown",
        ),
        pytest.param(
            [0, 1],
            {"numa": {"00000000:3B:00.0": 0, "00000000:3C:00.0": 1}},
            [
                ("GPU-00000000", 40 * GIB, 108, 0, "healthy"),
                ("GPU-00000001", 40 * GIB, 108, 1, "healthy"),
            ],
            "2 devices",
            id="two-gpus-on-two-numa-nodes",
        ),
        pytest.param(
            [{"mig_enabled": True, "mig": [MIG_1G, MIG_3G]}],
            {"numa": {"00000000:3B:00.0": 1}},
            [
                ("MIG-11111111", 4864 * 1024**2, 14, 1, "healthy"),
                ("MIG-11111111", 19968 * 1024**2, 42, 1, "healthy"),
            ],
            "2 devices",
            id="mig-instances-replace-their-gpu",
        ),
        pytest.param(
            [{"mig_enabled": True, "mig": []}],
            {},
            [],
            "MIG is enabled but has no instances",
            id="mig-without-instances",
        ),
        pytest.param(
            [{"ecc_uncorrected": 3}, 1],
            {},
            [
                ("GPU-00000000", 40 * GIB, 108, None, "unhealthy"),
                ("GPU-00000001", 40 * GIB, 108, None, "healthy"),
            ],
            "2 devices",
            id="uncorrected-ecc-errors-make-it-unhealthy",
        ),
        pytest.param(
            [{"ecc_uncorrected": 0}],
            {},
            [("GPU-00000000", 40 * GIB, 108, None, "healthy")],
            "1 devices",
            id="zero-ecc-errors-is-healthy",
        ),
        pytest.param(
            [{"failing": ["nvmlDeviceGetMemoryInfo"]}],
            {},
            [("GPU-00000000", 0, 0, None, "unhealthy")],
            "1 devices",
            id="an-nvml-error-on-one-call-makes-it-unhealthy",
        ),
        pytest.param(
            [{"lost": True}, 1],
            {},
            [("GPU-00000001", 40 * GIB, 108, None, "healthy")],
            "GPU 0: GPU is lost",
            id="a-gpu-lost-before-it-was-ever-seen",
        ),
        pytest.param(
            [0],
            {"driver": "missing"},
            [],
            "NVIDIA driver not found (libnvidia-ml.so.1 cannot be loaded): no CUDA devices",
            id="no-driver-library",
        ),
        pytest.param(
            [0],
            {"driver": "not_loaded"},
            [],
            "NVIDIA kernel driver not loaded: no CUDA devices",
            id="kernel-module-not-loaded",
        ),
    ],
)
def test_fingerprint(
    make_cuda: MakeCuda,
    gpu: MakeGpu,
    rows: list[int | dict[str, Any]],
    options: dict[str, Any],
    expected: list[tuple[Any, ...]],
    detail: str,
) -> None:
    table = [gpu(i) if isinstance(r, int) else gpu(i, **r) for i, r in enumerate(rows)]
    devices, text = _summary(make_cuda(table, **options))
    assert devices == expected
    assert detail in text


def test_a_gpu_offers_cuda_device_with_its_identity(make_cuda: MakeCuda, gpu: MakeGpu) -> None:
    fp = make_cuda([gpu(0)]).fingerprint()
    (device,) = fp.devices
    assert (device.kind, device.model, device.slot, device.capacity) == (
        "cuda",
        "NVIDIA A100-SXM4-40GB",
        "cuda.device",
        Decimal(1),
    )
    assert device.attributes == {"index": "0", "minor": "0", "pci_bus_id": "00000000:3B:00.0"}
    assert [(s.name, s.quantum, s.unit) for s in fp.slot_types] == [
        ("cuda.device", Decimal(1), "device")
    ]
    assert fp.enforcement is None  # discrete: no fractions to enforce


def test_mig_instances_name_their_parent(make_cuda: MakeCuda, gpu: MakeGpu) -> None:
    fp = make_cuda([gpu(0), gpu(1, mig_enabled=True, mig=[MIG_1G])]).fingerprint()
    whole, mig = fp.devices
    assert whole.attributes.get("mig") is None
    assert mig.attributes == {
        "index": "1",
        "minor": "1",
        "pci_bus_id": "00000000:3C:00.0",
        "mig": "true",
        "parent": gpu(1)["uuid"],
        "mig_index": "0",
        "gpu_instance_id": "13",
        "compute_instance_id": "0",
    }
    assert mig.model == "NVIDIA A100-SXM4-40GB MIG 1g.5gb"


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        pytest.param({"ecc_uncorrected": 2}, "2 uncorrected ECC errors since the driver loaded"),
        pytest.param({"failing": ["nvmlDeviceGetMinorNumber"]}, "NVML: Unknown Error"),
    ],
)
def test_unhealthy_devices_say_why(
    make_cuda: MakeCuda, gpu: MakeGpu, row: dict[str, Any], reason: str
) -> None:
    (device,) = make_cuda([gpu(0, **row)]).fingerprint().devices
    assert device.health == "unhealthy"
    assert device.attributes["health_reason"] == reason


def _fake(gpus: list[dict[str, Any]]) -> FakeNvml:
    return FakeNvml(FakeTable.model_validate({"gpus": gpus}))


def test_a_gpu_that_disappears_stays_listed_as_unhealthy(gpu: MakeGpu, tmp_path: Path) -> None:
    fake = _fake([gpu(0), gpu(1)])
    plugin = CudaPlugin(CudaSettings(sysfs_root=tmp_path, dev_root=tmp_path), nvml=fake)
    assert [d.health for d in plugin.fingerprint().devices] == ["healthy", "healthy"]

    fake.table.gpus[1].lost = True  # it fell off the bus
    after = {d.id: d for d in plugin.fingerprint().devices}
    lost = after[gpu(1)["uuid"]]
    assert (lost.health, lost.attributes["lost"]) == ("unhealthy", "true")
    assert lost.memory == 40 * GIB  # its last known data
    assert after[gpu(0)["uuid"]].health == "healthy"

    del fake.table.gpus[1]  # and is gone from the count entirely
    assert [d.health for d in plugin.fingerprint().devices] == ["healthy", "unhealthy"]

    fake.table.gpus.append(FakeTable.model_validate({"gpus": [gpu(1)]}).gpus[0])
    assert [d.health for d in plugin.fingerprint().devices] == ["healthy", "healthy"]


def test_the_driver_going_away_marks_every_known_gpu_unhealthy(
    gpu: MakeGpu, tmp_path: Path
) -> None:
    fake = _fake([gpu(0)])
    plugin = CudaPlugin(CudaSettings(sysfs_root=tmp_path, dev_root=tmp_path), nvml=fake)
    plugin.fingerprint()
    plugin.close()  # as the worker does before reloading...
    fake.table.driver = "missing"  # ...and the driver was uninstalled meanwhile
    fp = plugin.fingerprint()
    assert [d.health for d in fp.devices] == ["unhealthy"]
    assert "NVIDIA driver not found" in fp.detail


def test_nvml_is_initialised_once_and_released_on_close(gpu: MakeGpu, tmp_path: Path) -> None:
    fake = _fake([gpu(0)])
    plugin = CudaPlugin(CudaSettings(sysfs_root=tmp_path, dev_root=tmp_path), nvml=fake)
    plugin.fingerprint()
    plugin.fingerprint()
    plugin.stats()
    assert fake.init_count == 1
    plugin.close()
    assert fake.init_count == 0


@pytest.mark.parametrize(
    ("settings", "allowed", "expected"),
    [
        pytest.param({"shares_per_device": 2}, False, ("cuda.shares", Decimal(2), Decimal(2))),
        pytest.param({"shares_per_device": 2}, True, ("cuda.shares", Decimal(2), Decimal("0.1"))),
        pytest.param(
            {"shares_per_device": 1, "quantum": "0.25"},
            True,
            ("cuda.shares", Decimal(1), Decimal("0.25")),
        ),
    ],
    ids=["unenforced-only-whole-devices", "unenforced-allowed", "custom-quantum"],
)
def test_fractional_mode_offers_shares(
    make_cuda: MakeCuda,
    gpu: MakeGpu,
    settings: dict[str, Any],
    allowed: bool,
    expected: tuple[str, Decimal, Decimal],
) -> None:
    fp = make_cuda(
        [gpu(0)], mode="fractional", allow_unenforced_fractions=allowed, **settings
    ).fingerprint()
    (device,) = fp.devices
    (slot_type,) = fp.slot_types
    assert (device.slot, device.capacity, slot_type.quantum) == expected
    assert slot_type.unit == "share"
    assert fp.enforcement == "none"
    assert ("only whole devices are given" in fp.detail) is not allowed


@pytest.mark.parametrize(
    ("choice", "mps", "library", "expected", "detail"),
    [
        ("auto", False, None, "none", "no MPS control daemon and no preload limiter"),
        ("auto", True, None, "mps", "fractions enforced by MPS"),
        ("auto", False, "present", "preload", "fractions enforced by the preload limiter"),
        ("auto", True, "present", "mps", "fractions enforced by MPS"),
        ("preload", True, "present", "preload", "preload limiter"),
        ("mps", False, "present", "none", "MPS asked for but no control daemon socket"),
        ("preload", False, None, "none", "JOBGATE_CUDA_PRELOAD_LIBRARY is not set"),
        ("auto", False, "missing", "none", "not found"),
        ("none", True, "present", "none", "switched off by the operator"),
    ],
)
def test_enforcement_detection(
    make_cuda: MakeCuda,
    gpu: MakeGpu,
    node_root: Path,
    mps_dir: Path,
    choice: str,
    mps: bool,
    library: str | None,
    expected: str,
    detail: str,
) -> None:
    lib = node_root / "lib" / "libvgpu.so"
    if library == "present":
        lib.write_bytes(b"\x7fELF")
    plugin = make_cuda(
        [gpu(0)],
        mode="fractional",
        enforcement=choice,
        mps_pipe_dir=mps_dir if mps else node_root / "no-mps",
        preload_library=lib if library else None,
    )
    fp = plugin.fingerprint()
    assert fp.enforcement == expected
    assert detail in fp.detail


def test_a_stale_file_named_control_is_not_an_mps_daemon(
    make_cuda: MakeCuda, gpu: MakeGpu, node_root: Path
) -> None:
    pipe = node_root / "stale-mps"
    pipe.mkdir()
    (pipe / "control").write_text("")
    fp = make_cuda([gpu(0)], mode="fractional", mps_pipe_dir=pipe).fingerprint()
    assert fp.enforcement == "none"


def test_the_detail_names_the_cdi_spec(make_cuda: MakeCuda, gpu: MakeGpu, node_root: Path) -> None:
    assert "no CDI spec" in make_cuda([gpu(0)]).fingerprint().detail
    spec = node_root / "cdi" / "nvidia.yaml"
    spec.write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: '0'\n")
    assert f"CDI spec {spec}" in make_cuda([gpu(0)]).fingerprint().detail


def test_real_pynvml_on_a_machine_without_the_driver() -> None:
    """The real bindings, not the fake: no libnvidia-ml means zero devices, no crash."""
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this machine has an NVIDIA driver: scripts/gpu-proof.sh proves that case")
    plugin = CudaPlugin(CudaSettings())
    fp = plugin.fingerprint()
    assert (fp.devices, fp.slot_types, fp.enforcement) == ([], [], None)
    assert fp.detail == (
        "NVIDIA driver not found (libnvidia-ml.so.1 cannot be loaded): no CUDA devices"
    )
    assert plugin.stats() == []


def test_stats_report_utilisation_and_memory(make_cuda: MakeCuda, gpu: MakeGpu) -> None:
    plugin = make_cuda(
        [
            gpu(0, utilization=37, memory_used="10GiB"),
            gpu(1, mig_enabled=True, mig=[{**MIG_1G, "memory_used": "1GiB"}]),
            gpu(2, utilization=5),
        ]
    )
    plugin.fingerprint()
    stats = {s.device_id: s for s in plugin.stats()}
    first = stats[gpu(0)["uuid"]]
    assert (first.utilization, first.memory_used, first.memory_total) == (37.0, 10 * GIB, 40 * GIB)
    mig = stats[MIG_1G["uuid"]]  # NVML has no utilisation per MIG instance
    assert (mig.utilization, mig.memory_used, mig.memory_total) == (0.0, GIB, 4864 * 1024**2)
    assert len(stats) == 3


def test_stats_skip_a_gpu_that_was_lost_since_the_fingerprint(gpu: MakeGpu, tmp_path: Path) -> None:
    fake = _fake([gpu(0), gpu(1, utilization=50)])
    plugin = CudaPlugin(CudaSettings(sysfs_root=tmp_path, dev_root=tmp_path), nvml=fake)
    plugin.fingerprint()
    fake.table.gpus[0].lost = True
    assert [(s.device_id, s.utilization) for s in plugin.stats()] == [(gpu(1)["uuid"], 50.0)]
