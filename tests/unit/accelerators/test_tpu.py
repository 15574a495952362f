"""The tpu plugin against fake accel and VFIO trees."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import pytest

from plugins.accelerators.base import Allocation, ReservationError
from plugins.accelerators.fake_sysfs import TpuChipSpec, write_pci_device, write_tpu_tree
from plugins.accelerators.tpu import TpuPlugin, TpuSettings

GIB = 1024**3


def _chips(count: int, device_id: int = 0x005E, **options: int) -> list[TpuChipSpec]:
    return [
        TpuChipSpec(f"0000:00:{4 + i:02x}.0", device_id=device_id, numa_node=i // 4, **options)
        for i in range(count)
    ]


def _plugin(tmp_path: Path, chips: list[TpuChipSpec], *, vfio: bool = False) -> TpuPlugin:
    write_tpu_tree(tmp_path / "root", tmp_path / "dev", chips, vfio=vfio)
    return TpuPlugin(TpuSettings(sysfs_root=tmp_path / "root", dev_root=tmp_path / "dev"))


@pytest.mark.parametrize(
    ("chips", "vfio", "expected", "detail"),
    [
        pytest.param(_chips(4), False, ("TPU v4", 32 * GIB, 2), "4 chips (TPU v4)", id="v4-accel"),
        pytest.param(
            _chips(2, 0x0027, subsystem_device=0x004E),
            False,
            ("TPU v2", 16 * GIB, 2),
            "2 chips (TPU v2)",
            id="v2-by-subsystem",
        ),
        pytest.param(
            _chips(2, 0x0027, subsystem_device=0x004F),
            False,
            ("TPU v3", 32 * GIB, 2),
            "2 chips (TPU v3)",
            id="v3-by-subsystem",
        ),
        pytest.param(_chips(8, 0x0063), True, ("TPU v5e", 16 * GIB, 1), "8 chips", id="v5e-vfio"),
        pytest.param(_chips(4, 0x0062), True, ("TPU v5p", 95 * GIB, 2), "4 chips", id="v5p-vfio"),
        pytest.param(_chips(1, 0x006F), True, ("TPU v6e", 32 * GIB, 1), "1 chips", id="v6e-vfio"),
        pytest.param(
            _chips(1, 0x0099),
            False,
            ("TPU (PCI device 0x0099)", 0, 1),
            "1 chips",
            id="unknown-chip",
        ),
    ],
)
def test_chips_are_found_and_typed(
    tmp_path: Path,
    chips: list[TpuChipSpec],
    vfio: bool,
    expected: tuple[str, int, int],
    detail: str,
) -> None:
    fp = _plugin(tmp_path, chips, vfio=vfio).fingerprint()
    assert {(d.model, d.memory, d.processing_units) for d in fp.devices} == {expected}
    assert [d.id for d in fp.devices] == [c.pci_bus_id for c in chips]
    assert [d.numa_node for d in fp.devices] == [c.numa_node for c in chips]
    assert [d.attributes["chip_index"] for d in fp.devices] == [str(i) for i in range(len(chips))]
    assert detail in fp.detail
    assert [s.name for s in fp.slot_types] == ["tpu.device"]


def test_other_vendors_accel_devices_are_not_tpus(tmp_path: Path) -> None:
    root, dev = tmp_path / "root", tmp_path / "dev"
    write_tpu_tree(root, dev, _chips(1))
    npu = write_pci_device(root, "0000:00:0b.0", vendor=0x8086, device=0x7D1D)
    (dev / "accel1").touch()
    link = root / "sys/class/accel/accel1/device"
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(npu, link.parent))
    fp = TpuPlugin(TpuSettings(sysfs_root=root, dev_root=dev)).fingerprint()
    assert [d.id for d in fp.devices] == ["0000:00:04.0"]


def test_no_chips(tmp_path: Path) -> None:
    fp = TpuPlugin(TpuSettings(sysfs_root=tmp_path, dev_root=tmp_path)).fingerprint()
    assert (fp.devices, fp.slot_types, fp.detail) == ([], [], "no TPU chips")


def test_a_vanished_chip_stays_listed_unhealthy(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, _chips(2))
    plugin.fingerprint()
    (tmp_path / "dev/accel1").unlink()
    assert [(d.id, d.health) for d in plugin.fingerprint().devices] == [
        ("0000:00:04.0", "healthy"),
        ("0000:00:05.0", "unhealthy"),
    ]


@pytest.mark.parametrize(
    ("host", "picked", "extra"),
    [
        pytest.param(
            4, [0], {"TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1", "port": "8476"}, id="1-of-4"
        ),
        pytest.param(
            4, [2, 3], {"TPU_CHIPS_PER_PROCESS_BOUNDS": "1,2,1", "port": "8478"}, id="2-of-4"
        ),
        pytest.param(
            8, [4, 5, 6, 7], {"TPU_CHIPS_PER_PROCESS_BOUNDS": "2,2,1", "port": "8480"}, id="4-of-8"
        ),
        pytest.param(4, [0, 1, 2, 3], {}, id="whole-host-needs-no-bounds"),
        pytest.param(8, list(range(8)), {}, id="whole-8-chip-host"),
    ],
)
def test_subsets_get_process_bounds(
    tmp_path: Path, host: int, picked: list[int], extra: dict[str, str]
) -> None:
    extra = dict(extra)  # the parameter is shared between runs
    chips = _chips(host)
    plugin = _plugin(tmp_path, chips)
    res = plugin.reserve(
        Allocation("tpu.device", {chips[i].pci_bus_id: Decimal(1) for i in picked})
    )
    visible = ",".join(map(str, picked))
    expected = {"TPU_VISIBLE_CHIPS": visible, "TPU_VISIBLE_DEVICES": visible}
    if extra:
        port = extra.pop("port")
        expected.update(
            extra,
            TPU_PROCESS_BOUNDS="1,1,1",
            TPU_MESH_CONTROLLER_ADDRESS=f"localhost:{port}",
            TPU_MESH_CONTROLLER_PORT=port,
        )
    assert res.env == expected
    assert res.devices == [str(tmp_path / f"dev/accel{i}") for i in picked]


def test_a_subset_that_is_no_slice_is_refused(tmp_path: Path) -> None:
    chips = _chips(4)
    plugin = _plugin(tmp_path, chips)
    with pytest.raises(ReservationError, match="3 of 4 chips cannot form a TPU slice"):
        plugin.reserve(Allocation("tpu.device", {c.pci_bus_id: Decimal(1) for c in chips[:3]}))


def test_vfio_chips_bring_the_vfio_container_node(tmp_path: Path) -> None:
    chips = _chips(2, 0x0063)
    plugin = _plugin(tmp_path, chips, vfio=True)
    res = plugin.reserve(Allocation("tpu.device", {chips[1].pci_bus_id: Decimal(1)}))
    assert res.devices == [str(tmp_path / "dev/vfio/21"), str(tmp_path / "dev/vfio/vfio")]
    assert res.env["TPU_VISIBLE_CHIPS"] == "1"


def test_tpu_stats_are_not_collected(tmp_path: Path) -> None:
    assert _plugin(tmp_path, _chips(1)).stats() == []
