"""The worker's facade: loading, merged fingerprints, routing and validation."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

import pytest
import tomli_w
from pydantic import BaseModel

from contract.messages import NodeInfo
from plugins.accelerators.base import (
    Allocation,
    DeviceStats,
    Fingerprint,
    Reservation,
    ReservationError,
    SlotType,
)
from plugins.accelerators.cuda import CudaPlugin, CudaSettings
from plugins.accelerators.fake_nvml import FakeNvml, FakeTable
from plugins.accelerators.fake_sysfs import TpuChipSpec, write_tpu_tree
from plugins.accelerators.mock import MockSettings
from plugins.accelerators.node import AcceleratorConfigError, NodeAccelerators
from plugins.accelerators.tpu import TpuPlugin, TpuSettings
from plugins.resources import ResourceSlots

GIB = 1024**3
D = Decimal


def _devices_file(tmp_path: Path, devices: list[dict[str, Any]], **cuda: Any) -> Path:
    path = tmp_path / f"mock-{len(list(tmp_path.glob('mock-*')))}.toml"
    path.write_text(tomli_w.dumps({"devices": devices, "cuda": cuda}))
    return path


def _mock_node(tmp_path: Path, devices: list[dict[str, Any]], **cuda: Any) -> NodeAccelerators:
    return NodeAccelerators.load(
        ["mock"], {"mock": {"devices": _devices_file(tmp_path, devices, **cuda)}}
    )


FRACTIONAL = {"mode": "fractional", "quantum": "0.1"}


@pytest.mark.parametrize(
    ("count", "shares_per_device"),
    [pytest.param(1, "2", id="one-gpu-two-shares"), pytest.param(2, "1", id="two-gpus-one-share")],
)
def test_scenario_2_the_node_can_give_two_fgpu(
    tmp_path: Path, count: int, shares_per_device: str
) -> None:
    node = _mock_node(
        tmp_path,
        [{"kind": "cuda", "memory": "8GiB", "count": count}],
        shares_per_device=shares_per_device,
        **FRACTIONAL,
    ).fingerprint()
    assert node.capacity == ResourceSlots({"cuda.shares": D(2)})


def test_capacity_sums_healthy_devices_per_slot(tmp_path: Path) -> None:
    node = _mock_node(
        tmp_path,
        [
            {"kind": "cuda", "memory": "8GiB", "count": 3},
            {"kind": "cuda", "memory": "8GiB", "health": "unhealthy"},
            {"kind": "tpu", "memory": "16GiB", "count": 4},
        ],
        shares_per_device="4",
        **FRACTIONAL,
    ).fingerprint()
    assert node.capacity == ResourceSlots({"cuda.shares": D(12), "tpu.device": D(4)})
    assert len(node.devices) == 8
    assert sorted(node.slot_types) == ["cuda.shares", "tpu.device"]
    assert node.enforcement == "none"
    assert list(node.details) == ["mock"]


def _tpu_plugin(tmp_path: Path, chips: int = 2) -> TpuPlugin:
    specs = [TpuChipSpec(f"0000:00:{4 + i:02x}.0") for i in range(chips)]
    write_tpu_tree(tmp_path / "root", tmp_path / "dev", specs)
    return TpuPlugin(TpuSettings(sysfs_root=tmp_path / "root", dev_root=tmp_path / "dev"))


def _fake_cuda(tmp_path: Path, driver: str = "loaded", **settings: Any) -> CudaPlugin:
    table = FakeTable.model_validate(
        {
            "driver": driver,
            "gpus": [
                {
                    "uuid": "GPU-aaaa",
                    "memory": "8GiB",
                    "pci_bus_id": "00000000:3B:00.0",
                    "minor": 0,
                }
            ],
        }
    )
    return CudaPlugin(
        CudaSettings(sysfs_root=tmp_path, dev_root=tmp_path, **settings), nvml=FakeNvml(table)
    )


def test_reserve_routes_each_slot_and_merges(tmp_path: Path) -> None:
    mock_file = _devices_file(
        tmp_path, [{"kind": "cuda", "memory": "8GiB"}], shares_per_device="2", **FRACTIONAL
    )
    node = NodeAccelerators.load(["mock"], {"mock": MockSettings(devices=mock_file)})
    node = NodeAccelerators([*node.plugins, _tpu_plugin(tmp_path)])
    res = node.reserve(
        {"cuda.shares": {"mock-cuda-0": "0.5"}, "tpu.device": {"0000:00:05.0": D(1)}}
    )
    assert res.env["JOBGATE_CUDA_MEMORY_BYTES"] == str(2 * GIB)
    assert res.env["TPU_VISIBLE_CHIPS"] == "1"
    assert res.devices == [str(tmp_path / "dev/accel1")]


def test_no_devices_no_reservation(tmp_path: Path) -> None:
    assert _mock_node(tmp_path, []).reserve({}) == Reservation()


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (
            {"rocm.device": {"x": "1"}},
            r"rocm.device: no accelerator plugin on this node offers it \(offered: cuda.shares\)",
        ),
        ({"cuda.shares": {"mock-cuda-9": "1"}}, "no device 'mock-cuda-9' on this node"),
        ({"cuda.shares": {"mock-cuda-0": "2.5"}}, "more than the device offers"),
        ({"cuda.shares": {"mock-cuda-0": "0.05"}}, "not a multiple of the quantum 0.1"),
        ({"cuda.shares": {"mock-cuda-0": "lots"}}, "amount 'lots' on mock-cuda-0 is not a number"),
        ({"cuda.shares": {"mock-cuda-0": "NaN"}}, "must be positive"),
        ({"cuda.shares": {"mock-cuda-1": "1"}}, "mock-cuda-1 is unhealthy"),
    ],
)
def test_reserve_refuses_what_the_node_cannot_honour(
    tmp_path: Path, request_: dict[str, dict[str, str]], message: str
) -> None:
    node = _mock_node(
        tmp_path,
        [
            {"kind": "cuda", "memory": "8GiB"},
            {"kind": "cuda", "memory": "8GiB", "health": "unhealthy"},
        ],
        shares_per_device="2",
        **FRACTIONAL,
    )
    with pytest.raises(ReservationError, match=message):
        node.reserve(request_)


def test_two_plugins_offering_one_slot_is_a_configuration_error(tmp_path: Path) -> None:
    mock = _mock_node(tmp_path, [{"kind": "cuda", "memory": "8GiB"}]).plugins[0]
    node = NodeAccelerators([_fake_cuda(tmp_path), mock])
    with pytest.raises(
        AcceleratorConfigError, match=r"plugins 'cuda' and 'mock' both offer cuda\.device"
    ):
        node.fingerprint()


def test_a_cuda_plugin_without_a_driver_leaves_the_slot_to_the_mock(tmp_path: Path) -> None:
    mock = _mock_node(tmp_path, [{"kind": "cuda", "memory": "8GiB"}]).plugins[0]
    node = NodeAccelerators([_fake_cuda(tmp_path, driver="missing"), mock]).fingerprint()
    assert [d.id for d in node.devices] == ["mock-cuda-0"]
    assert "NVIDIA driver not found" in node.details["cuda"]


class _Broken:
    name: ClassVar[str] = "broken"
    Settings: ClassVar[type[BaseModel]] = BaseModel

    def fingerprint(self) -> Fingerprint:
        raise RuntimeError("driver wedged")

    def reserve(self, allocation: Allocation) -> Reservation:
        raise AssertionError("never routed: it offers nothing")

    def stats(self) -> list[DeviceStats]:
        raise RuntimeError("counters unreadable")


def test_a_broken_plugin_does_not_take_the_node_down(tmp_path: Path) -> None:
    mock = _mock_node(tmp_path, [{"kind": "tpu", "memory": "16GiB"}]).plugins[0]
    accel = NodeAccelerators([_Broken(), mock])
    node = accel.fingerprint()
    assert node.details["broken"] == "fingerprint failed: driver wedged"
    assert [d.id for d in node.devices] == ["mock-tpu-0"]
    assert [s.device_id for s in accel.stats()] == ["mock-tpu-0"]


class _Setter:
    """Offers one slot and sets SHARED to its value (subclasses name it)."""

    name: ClassVar[str] = "setter"
    Settings: ClassVar[type[BaseModel]] = BaseModel

    def __init__(self, slot: str, value: str) -> None:
        self.slot, self.value = slot, value

    def fingerprint(self) -> Fingerprint:
        from plugins.accelerators.base import Device

        device = Device(f"{self.slot}-0", "x", "X", 0, 0, None, self.slot, D(1))
        return Fingerprint(self.name, [device], [SlotType(self.slot)])

    def reserve(self, allocation: Allocation) -> Reservation:
        return Reservation(env={"SHARED": self.value, f"ONLY_{self.name.upper()}": "1"})

    def stats(self) -> list[DeviceStats]:
        return []


class _SetterA(_Setter):
    name = "a"


class _SetterB(_Setter):
    name = "b"


def test_slots_that_disagree_on_an_env_var_are_refused() -> None:
    agree = NodeAccelerators([_SetterA("x.one", "same"), _SetterB("x.two", "same")])
    res = agree.reserve({"x.one": {"x.one-0": "1"}, "x.two": {"x.two-0": "1"}})
    assert res.env == {"SHARED": "same", "ONLY_A": "1", "ONLY_B": "1"}
    clash = NodeAccelerators([_SetterA("x.one", "this"), _SetterB("x.two", "that")])
    with pytest.raises(ReservationError, match=r"x\.two: plugin 'b' sets SHARED differently"):
        clash.reserve({"x.one": {"x.one-0": "1"}, "x.two": {"x.two-0": "1"}})


@pytest.mark.parametrize(
    ("names", "settings", "message"),
    [
        (
            ["nope"],
            {},
            r"no plugin 'nope' in jobgate.accelerators.v1 \(available: .*cuda.*mock.*rocm.*tpu",
        ),
        (
            ["cuda"],
            {"cuda": {"shares_per_device": "-1"}},
            "^accelerator plugin 'cuda': shares_per_device: Input should be greater than 0$",
        ),
        (
            ["cuda"],
            {"cuda": {"no_such_setting": 1}},
            "no_such_setting: Extra inputs are not permitted",
        ),
        (["rocm"], {"cuda": {}}, r"settings given for plugins not listed: \['cuda'\]"),
        (["rocm"], {"rocm": TpuSettings()}, "takes RocmSettings, not TpuSettings"),
        (["mock"], {}, "JOBGATE_MOCK_DEVICES is not set"),
        (["rocm", "rocm"], {}, "listed twice"),
    ],
)
def test_configuration_errors(names: list[str], settings: dict[str, Any], message: str) -> None:
    with pytest.raises(AcceleratorConfigError, match=message):
        NodeAccelerators.load(names, settings)


def test_plugins_read_their_environment_when_given_no_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tpu_tree(tmp_path / "root", tmp_path / "dev", [TpuChipSpec("0000:00:04.0")])
    monkeypatch.setenv("JOBGATE_TPU_SYSFS_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("JOBGATE_TPU_DEV_ROOT", str(tmp_path / "dev"))
    node = NodeAccelerators.load(["tpu"]).fingerprint()
    assert node.capacity == ResourceSlots({"tpu.device": D(1)})


def test_the_fingerprint_fits_the_workers_node_info(tmp_path: Path, mps_dir: Path) -> None:
    cuda = _fake_cuda(tmp_path, mode="fractional", shares_per_device="2", mps_pipe_dir=mps_dir)
    node = NodeAccelerators([cuda]).fingerprint()
    info = NodeInfo(
        node_id="n1",
        hostname="h",
        address="127.0.0.1",
        queue="q",
        runtime="sim",
        capacity=node.capacity.to_json(),
        **node.node_info_fields(),
    )
    assert info.fraction_enforcement == "mps"
    assert info.capacity == {"cuda.shares": "2"}
    assert info.devices[0]["id"] == "GPU-aaaa"
    assert info.devices[0]["capacity"] == "2"


def test_reserve_fingerprints_first_and_close_releases_nvml(tmp_path: Path) -> None:
    cuda = _fake_cuda(tmp_path, mode="fractional", allow_unenforced_fractions=True)
    (tmp_path / "nvidia0").touch()
    (tmp_path / "nvidiactl").touch()
    accel = NodeAccelerators([cuda])
    res = accel.reserve({"cuda.shares": {"GPU-aaaa": "0.5"}})
    assert res.env["JOBGATE_CUDA_MEMORY_BYTES"] == str(4 * GIB)
    assert res.devices == [str(tmp_path / "nvidia0"), str(tmp_path / "nvidiactl")]
    nvml = cuda._nvml
    assert isinstance(nvml, FakeNvml)
    assert nvml.init_count == 1
    accel.close()
    assert nvml.init_count == 0
