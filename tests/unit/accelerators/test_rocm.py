"""The rocm plugin against fake KFD topology trees."""

from __future__ import annotations

import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from plugins.accelerators.base import Allocation, ReservationError
from plugins.accelerators.fake_sysfs import RocmGpuSpec, write_rocm_tree
from plugins.accelerators.rocm import RocmPlugin, RocmSettings

GIB = 1024**3
MI210 = RocmGpuSpec(pci_bus_id="0000:c3:00.0", unique_id=0xA1, numa_node=0, render_minor=128)
MI300 = RocmGpuSpec(
    pci_bus_id="0000:0c:00.0",
    device_id=0x74A1,
    gfx="gfx942",
    compute_units=304,
    memory=192 * GIB,
    render_minor=136,
    unique_id=0xB2,
    numa_node=1,
)


def _plugin(tmp_path: Path, gpus: list[RocmGpuSpec], **options: bool | int) -> RocmPlugin:
    write_rocm_tree(tmp_path / "root", tmp_path / "dev", gpus, **options)  # type: ignore[arg-type]
    return RocmPlugin(RocmSettings(sysfs_root=tmp_path / "root", dev_root=tmp_path / "dev"))


def test_gpus_are_read_from_the_kfd_topology(tmp_path: Path) -> None:
    fp = _plugin(tmp_path, [MI210, MI300], cpu_agents=2).fingerprint()
    summary = [
        (d.id, d.model, d.memory, d.processing_units, d.numa_node, d.health) for d in fp.devices
    ]
    assert summary == [
        ("GPU-00000000000000a1", "AMD Instinct MI210", 64 * GIB, 104, 0, "healthy"),
        ("GPU-00000000000000b2", "AMD Instinct MI300X", 192 * GIB, 304, 1, "healthy"),
    ]
    assert fp.devices[1].attributes == {
        "kfd_node": "3",
        "pci_bus_id": "0000:0c:00.0",
        "render_minor": "136",
        "gfx": "gfx942",
    }
    assert [(s.name, s.quantum) for s in fp.slot_types] == [("rocm.device", Decimal(1))]
    assert fp.detail == "2 GPUs in the KFD topology"


@pytest.mark.parametrize(
    ("spec", "device_id", "model"),
    [
        pytest.param(
            RocmGpuSpec(device_id=0x744C, gfx="gfx1100", unique_id=0),
            "0000:c3:00.0",
            "AMD GPU gfx1100 (0x744c)",
            id="unknown-part-without-unique-id",
        ),
        pytest.param(RocmGpuSpec(device_id=0x738C), "GPU-1a2b3c4d5e6f7081", "AMD Instinct MI100"),
    ],
)
def test_names_and_ids(tmp_path: Path, spec: RocmGpuSpec, device_id: str, model: str) -> None:
    (device,) = _plugin(tmp_path, [spec]).fingerprint().devices
    assert (device.id, device.model) == (device_id, model)


def test_no_driver_means_no_devices(tmp_path: Path) -> None:
    fp = RocmPlugin(RocmSettings(sysfs_root=tmp_path, dev_root=tmp_path)).fingerprint()
    assert (fp.devices, fp.slot_types) == ([], [])
    assert "no KFD topology" in fp.detail
    assert "amdgpu driver not loaded" in fp.detail


def test_cpu_agents_alone_are_no_gpus(tmp_path: Path) -> None:
    fp = _plugin(tmp_path, [], cpu_agents=2).fingerprint()
    assert (fp.devices, fp.detail) == ([], "0 GPUs in the KFD topology")


def test_a_gpu_without_its_render_node_is_unhealthy(tmp_path: Path) -> None:
    (device,) = _plugin(tmp_path, [MI210], render_nodes=False).fingerprint().devices
    assert device.health == "unhealthy"
    assert device.attributes["health_reason"] == (
        f"render node {tmp_path / 'dev/dri/renderD128'} is missing"
    )


def test_a_vanished_gpu_stays_listed_unhealthy(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, [MI210, MI300])
    plugin.fingerprint()
    shutil.rmtree(tmp_path / "root/sys/class/kfd/kfd/topology/nodes/2")
    devices = {d.id: d for d in plugin.fingerprint().devices}
    assert devices["GPU-00000000000000b2"].attributes["lost"] == "true"
    assert devices["GPU-00000000000000b2"].health == "unhealthy"
    assert devices["GPU-00000000000000a1"].health == "healthy"


def test_reserve_gives_kfd_render_nodes_and_visible_devices(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, [MI210, MI300])
    plugin.fingerprint()
    res = plugin.reserve(
        Allocation(
            "rocm.device",
            {"GPU-00000000000000b2": Decimal(1), "GPU-00000000000000a1": Decimal(1)},
        )
    )
    assert res.env == {
        "ROCR_VISIBLE_DEVICES": "GPU-00000000000000a1,GPU-00000000000000b2",
        "HIP_VISIBLE_DEVICES": "0,1",
    }
    dev = tmp_path / "dev"
    assert res.devices == [
        str(dev / "kfd"),
        str(dev / "dri/renderD128"),
        str(dev / "dri/renderD136"),
    ]


def test_without_unique_ids_rocr_gets_positions(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, [RocmGpuSpec(unique_id=0)])
    res = plugin.reserve(Allocation("rocm.device", {"0000:c3:00.0": Decimal(1)}))
    assert res.env == {"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0"}


@pytest.mark.parametrize(
    ("amounts", "message"),
    [
        ({"GPU-ffff": Decimal(1)}, "no device 'GPU-ffff'"),
        ({"GPU-00000000000000a1": Decimal(2)}, "more than the device offers"),
        ({"GPU-00000000000000a1": Decimal("0.5")}, "not a multiple of the quantum 1"),
    ],
)
def test_reserve_refuses(tmp_path: Path, amounts: dict[str, Decimal], message: str) -> None:
    plugin = _plugin(tmp_path, [MI210])
    with pytest.raises(ReservationError, match=message):
        plugin.reserve(Allocation("rocm.device", amounts))


def test_reserve_refuses_an_unhealthy_gpu(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, [MI210], render_nodes=False)
    with pytest.raises(ReservationError, match="is unhealthy \\(render node"):
        plugin.reserve(Allocation("rocm.device", {"GPU-00000000000000a1": Decimal(1)}))


def test_stats_come_from_the_drm_counters(tmp_path: Path) -> None:
    busy = RocmGpuSpec(unique_id=0xC3, busy_percent=63, vram_used=5 * GIB)
    stats = _plugin(tmp_path, [busy]).stats()
    assert [(s.device_id, s.utilization, s.memory_used, s.memory_total) for s in stats] == [
        ("GPU-00000000000000c3", 63.0, 5 * GIB, 64 * GIB)
    ]
