"""The cuda plugin's reservations: env, device nodes or CDI, MPS and preload limits."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from plugins.accelerators.base import Allocation, Reservation, ReservationError
from plugins.accelerators.cuda import CudaPlugin
from plugins.accelerators.cuda.cdi import scan_cdi
from plugins.common import Mount

GIB = 1024**3
MakeCuda = Callable[..., CudaPlugin]
MakeGpu = Callable[..., dict[str, Any]]
D = Decimal


def _reserve(plugin: CudaPlugin, slot: str, amounts: dict[str, str]) -> Reservation:
    plugin.fingerprint()
    return plugin.reserve(Allocation(slot, {k: D(v) for k, v in amounts.items()}))


def test_a_whole_gpu_through_device_nodes(
    make_cuda: MakeCuda, gpu: MakeGpu, node_root: Path
) -> None:
    uuid = gpu(0)["uuid"]
    res = _reserve(make_cuda([gpu(0), gpu(1)]), "cuda.device", {uuid: "1"})
    dev = node_root / "dev"
    assert res.env == {
        "CUDA_VISIBLE_DEVICES": uuid,
        "NVIDIA_VISIBLE_DEVICES": uuid,
        "JOBGATE_CUDA_SHARES": "1",
        "JOBGATE_CUDA_MEMORY_BYTES": str(40 * GIB),
        "JOBGATE_CUDA_MEMORY_BYTES_PER_DEVICE": str(40 * GIB),
        "JOBGATE_CUDA_ENFORCEMENT": "exclusive",
    }
    assert res.devices == [
        str(dev / "nvidia0"),
        str(dev / "nvidiactl"),
        str(dev / "nvidia-uvm"),
        str(dev / "nvidia-uvm-tools"),
    ]
    assert (res.cdi_devices, res.mounts) == ([], [])


def test_devices_are_listed_in_nvml_order_whatever_the_allocation_order(
    make_cuda: MakeCuda, gpu: MakeGpu, node_root: Path
) -> None:
    uuids = [gpu(i)["uuid"] for i in range(3)]
    res = _reserve(
        make_cuda([gpu(i) for i in range(3)]), "cuda.device", {uuids[2]: "1", uuids[0]: "1"}
    )
    assert res.env["CUDA_VISIBLE_DEVICES"] == f"{uuids[0]},{uuids[2]}"
    assert res.env["JOBGATE_CUDA_SHARES"] == "2"
    assert res.devices[:2] == [str(node_root / "dev/nvidia0"), str(node_root / "dev/nvidia2")]


def test_uvm_nodes_are_given_only_when_they_exist(
    make_cuda: MakeCuda, gpu: MakeGpu, node_root: Path
) -> None:
    plugin = make_cuda([gpu(0)], dev_nodes=False)
    (node_root / "dev/nvidia0").touch()
    (node_root / "dev/nvidiactl").touch()
    res = _reserve(plugin, "cuda.device", {gpu(0)["uuid"]: "1"})
    assert res.devices == [str(node_root / "dev/nvidia0"), str(node_root / "dev/nvidiactl")]


def test_a_missing_device_node_is_a_clear_error(make_cuda: MakeCuda, gpu: MakeGpu) -> None:
    plugin = make_cuda([gpu(0)], dev_nodes=False)
    with pytest.raises(ReservationError, match=r"device node .*/dev/nvidia0 does not exist"):
        _reserve(plugin, "cuda.device", {gpu(0)["uuid"]: "1"})


YAML_UUIDS = """\
cdiVersion: 0.6.0
kind: nvidia.com/gpu
annotations:
  example.com/hostname: gpu-node-7
devices:
- name: GPU-00000000-1111-2222-3333-444444444444
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: GPU-00000001-1111-2222-3333-444444444444
- name: MIG-11111111-aaaa-bbbb-cccc-000000000001
containerEdits:
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
"""
JSON_INDICES = json.dumps(
    {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0"}, {"name": "1"}, {"name": "1:0"}, {"name": "all"}],
    }
)
OTHER_KIND = "cdiVersion: 0.5.0\nkind: amd.com/gpu\ndevices:\n- name: GPU-00000000-1111\n"
MIG: dict[str, Any] = {
    "uuid": "MIG-11111111-aaaa-bbbb-cccc-000000000001",
    "name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
    "memory": "4864MiB",
    "multiprocessors": 14,
}


@pytest.mark.parametrize(
    ("spec_name", "spec", "pick", "expected"),
    [
        pytest.param(
            "nvidia.yaml",
            YAML_UUIDS,
            1,
            ["nvidia.com/gpu=GPU-00000001-1111-2222-3333-444444444444"],
            id="yaml-uuid-names",
        ),
        pytest.param("nvidia.json", JSON_INDICES, 1, ["nvidia.com/gpu=1"], id="json-index-names"),
        pytest.param(
            "nvidia.yaml", YAML_UUIDS, "mig", ["nvidia.com/gpu=" + MIG["uuid"]], id="mig-by-uuid"
        ),
        pytest.param("nvidia.json", JSON_INDICES, "mig", ["nvidia.com/gpu=1:0"], id="mig-by-index"),
    ],
)
def test_cdi_names_replace_device_nodes(
    make_cuda: MakeCuda,
    gpu: MakeGpu,
    node_root: Path,
    spec_name: str,
    spec: str,
    pick: int | str,
    expected: list[str],
) -> None:
    (node_root / "cdi" / spec_name).write_text(spec)
    plugin = make_cuda(
        [gpu(0), gpu(1, mig_enabled=True, mig=[MIG])] if pick == "mig" else [gpu(0), gpu(1)]
    )
    device = MIG["uuid"] if pick == "mig" else gpu(1)["uuid"]
    res = _reserve(plugin, "cuda.device", {device: "1"})
    assert res.cdi_devices == expected
    assert res.devices == []
    assert res.env["CUDA_VISIBLE_DEVICES"] == device


def test_a_spec_of_another_kind_is_not_an_nvidia_spec(
    make_cuda: MakeCuda, gpu: MakeGpu, node_root: Path
) -> None:
    (node_root / "cdi" / "amd.yaml").write_text(OTHER_KIND)
    res = _reserve(make_cuda([gpu(0)]), "cuda.device", {gpu(0)["uuid"]: "1"})
    assert (res.cdi_devices, res.devices[0]) == ([], str(node_root / "dev/nvidia0"))


def test_a_cdi_spec_that_does_not_name_the_gpu_is_refused(
    make_cuda: MakeCuda, gpu: MakeGpu, node_root: Path
) -> None:
    (node_root / "cdi" / "nvidia.json").write_text(JSON_INDICES)
    plugin = make_cuda([gpu(i) for i in range(3)])
    with pytest.raises(
        ReservationError, match=r"names neither GPU-00000002.* nor index 2; regenerate"
    ):
        _reserve(plugin, "cuda.device", {gpu(2)["uuid"]: "1"})


def test_a_mig_instance_without_cdi_is_refused(make_cuda: MakeCuda, gpu: MakeGpu) -> None:
    plugin = make_cuda([gpu(0, mig_enabled=True, mig=[MIG])])
    with pytest.raises(ReservationError, match="needs a CDI spec"):
        _reserve(plugin, "cuda.device", {MIG["uuid"]: "1"})


def test_shares_under_mps(
    make_cuda: MakeCuda, gpu: MakeGpu, node_root: Path, mps_dir: Path
) -> None:
    plugin = make_cuda(
        [gpu(0)],
        mode="fractional",
        shares_per_device=2,
        mps_pipe_dir=mps_dir,
        mps_shm_dir=node_root / "shm",
    )
    res = _reserve(plugin, "cuda.shares", {gpu(0)["uuid"]: "0.5"})
    assert res.env["JOBGATE_CUDA_ENFORCEMENT"] == "mps"
    assert res.env["JOBGATE_CUDA_SHARES"] == "0.5"
    assert res.env["JOBGATE_CUDA_MEMORY_BYTES"] == str(10 * GIB)  # 0.5 of 2 shares of 40 GiB
    assert res.env["CUDA_MPS_PIPE_DIRECTORY"] == str(mps_dir)
    assert res.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert res.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M"
    assert res.mounts == [
        Mount(str(mps_dir), str(mps_dir)),
        Mount(str(node_root / "shm"), "/dev/shm"),
    ]
    assert res.devices[0] == str(node_root / "dev/nvidia0")
    assert "LD_PRELOAD" not in res.env


def test_mps_without_a_shared_memory_dir(make_cuda: MakeCuda, gpu: MakeGpu, mps_dir: Path) -> None:
    plugin = make_cuda([gpu(0)], mode="fractional", mps_pipe_dir=mps_dir, mps_shm_dir=None)
    res = _reserve(plugin, "cuda.shares", {gpu(0)["uuid"]: "1"})
    assert res.mounts == [Mount(str(mps_dir), str(mps_dir))]
    assert res.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "100"


def test_shares_under_a_preload_limiter(make_cuda: MakeCuda, gpu: MakeGpu, node_root: Path) -> None:
    library = node_root / "lib" / "libvgpu.so"
    library.write_bytes(b"\x7fELF")
    plugin = make_cuda([gpu(0), gpu(1, memory="80GiB")], mode="fractional", preload_library=library)
    res = _reserve(plugin, "cuda.shares", {gpu(1)["uuid"]: "0.3", gpu(0)["uuid"]: "0.5"})
    assert res.env["JOBGATE_CUDA_ENFORCEMENT"] == "preload"
    assert res.env["LD_PRELOAD"] == "/usr/local/jobgate/lib/libvgpu.so"
    assert res.env["CUDA_DEVICE_SM_LIMIT"] == "30"  # the smaller share of the two
    assert res.env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "20480m"  # GPU 0 first: 0.5 x 40 GiB
    assert res.env["CUDA_DEVICE_MEMORY_LIMIT_1"] == "24576m"  # 0.3 x 80 GiB
    assert res.mounts == [Mount(str(library), "/usr/local/jobgate/lib/libvgpu.so", read_only=True)]
    assert "CUDA_MPS_PIPE_DIRECTORY" not in res.env


def test_unenforced_fractions_when_the_operator_allows_them(
    make_cuda: MakeCuda, gpu: MakeGpu
) -> None:
    plugin = make_cuda([gpu(0)], mode="fractional", allow_unenforced_fractions=True)
    res = _reserve(plugin, "cuda.shares", {gpu(0)["uuid"]: "0.4"})
    assert res.env["JOBGATE_CUDA_ENFORCEMENT"] == "none"
    assert not any(k.startswith(("CUDA_MPS_", "CUDA_DEVICE_", "LD_PRELOAD")) for k in res.env)
    assert res.mounts == []


def test_unenforced_fractions_are_refused_but_whole_devices_are_not(
    make_cuda: MakeCuda, gpu: MakeGpu
) -> None:
    plugin = make_cuda([gpu(0)], mode="fractional", shares_per_device=2)
    with pytest.raises(
        ReservationError, match=r"no fraction enforcement.*only whole devices \(2 shares\)"
    ):
        _reserve(plugin, "cuda.shares", {gpu(0)["uuid"]: "0.5"})
    res = _reserve(plugin, "cuda.shares", {gpu(0)["uuid"]: "2"})
    assert res.env["JOBGATE_CUDA_MEMORY_BYTES"] == str(40 * GIB)


@pytest.mark.parametrize(
    ("mode", "slot", "amounts", "message"),
    [
        (
            "fractional",
            "cuda.shares",
            {"GPU-nope": "1"},
            r"no device 'GPU-nope' on this node \(known: GPU-0000",
        ),
        (
            "fractional",
            "cuda.device",
            {"gpu0": "1"},
            "cuda.device: this node does not offer the slot",
        ),
        (
            "discrete",
            "cuda.shares",
            {"gpu0": "1"},
            "cuda.shares: this node does not offer the slot",
        ),
        (
            "fractional",
            "cuda.shares",
            {"gpu0": "2.5"},
            r"2.5 on GPU-0+-.* is more than the device offers \(2\)",
        ),
        ("fractional", "cuda.shares", {"gpu0": "0.25"}, "not a multiple of the quantum 0.1"),
        ("fractional", "cuda.shares", {"gpu0": "0"}, "must be positive"),
        ("fractional", "cuda.shares", {"gpu0": "-1"}, "must be positive"),
        ("fractional", "cuda.shares", {"sick": "1"}, "is unhealthy \\(3 uncorrected ECC errors"),
        ("discrete", "cuda.device", {"gpu0": "0.5"}, "not a multiple of the quantum 1"),
        ("discrete", "cuda.device", {}, "the allocation names no device"),
    ],
)
def test_allocations_the_node_cannot_honour(
    make_cuda: MakeCuda,
    gpu: MakeGpu,
    mode: str,
    slot: str,
    amounts: dict[str, str],
    message: str,
) -> None:
    names = {"gpu0": gpu(0)["uuid"], "sick": gpu(1)["uuid"]}
    plugin = make_cuda(
        [gpu(0), gpu(1, ecc_uncorrected=3)],
        mode=mode,
        shares_per_device=2,
        allow_unenforced_fractions=True,
    )
    with pytest.raises(ReservationError, match=message):
        _reserve(plugin, slot, {names.get(k, k): v for k, v in amounts.items()})


def test_reserve_fingerprints_first_when_it_has_to(make_cuda: MakeCuda, gpu: MakeGpu) -> None:
    plugin = make_cuda([gpu(0)])
    res = plugin.reserve(Allocation("cuda.device", {gpu(0)["uuid"]: D(1)}))
    assert re.fullmatch(r"GPU-[0-9a-f-]+", res.env["CUDA_VISIBLE_DEVICES"])


def test_the_cdi_scan_reads_device_names_only(node_root: Path) -> None:
    (node_root / "cdi" / "nvidia.yaml").write_text(YAML_UUIDS)
    (node_root / "cdi" / "amd.yaml").write_text(OTHER_KIND)
    (node_root / "cdi" / "notes.txt").write_text("kind: nvidia.com/gpu\n- name: stray\n")
    specs = scan_cdi([node_root / "cdi", node_root / "absent"])
    assert specs.files == [node_root / "cdi" / "nvidia.yaml"]
    assert specs.names == {
        "GPU-00000000-1111-2222-3333-444444444444",
        "GPU-00000001-1111-2222-3333-444444444444",
        "MIG-11111111-aaaa-bbbb-cccc-000000000001",
    }  # not the annotation's host name, not the hook, not the other vendor's device
