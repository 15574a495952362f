"""Every accelerator plugin loads through its entry point, builds and fingerprints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest
import tomli_w

from plugins.accelerators.base import AcceleratorPlugin
from plugins.accelerators.cuda.nvml import NvmlApi
from plugins.accelerators.fake_nvml import FakeNvml
from plugins.accelerators.fake_sysfs import (
    RocmGpuSpec,
    TpuChipSpec,
    write_rocm_tree,
    write_tpu_tree,
)
from plugins.loader import ACCELERATORS, load_group, protocol_members


def test_the_group_holds_the_four_builtin_plugins() -> None:
    found = load_group(ACCELERATORS, AcceleratorPlugin)
    assert {"cuda", "rocm", "tpu", "mock"} <= set(found)
    assert {name: found[name].name for name in ("cuda", "rocm", "tpu", "mock")} == {
        "cuda": "cuda",
        "rocm": "rocm",
        "tpu": "tpu",
        "mock": "mock",
    }


def _cuda(tmp: Path) -> dict[str, Any]:
    table = tmp / "nvml.json"
    table.write_text(
        '{"gpus": [{"uuid": "GPU-1", "memory": "16GiB", "pci_bus_id": "0000:3b:00.0", "minor": 0}]}'
    )
    return {"fake_nvml": table, "sysfs_root": tmp, "dev_root": tmp}


def _rocm(tmp: Path) -> dict[str, Any]:
    write_rocm_tree(tmp / "root", tmp / "dev", [RocmGpuSpec()])
    return {"sysfs_root": tmp / "root", "dev_root": tmp / "dev"}


def _tpu(tmp: Path) -> dict[str, Any]:
    write_tpu_tree(tmp / "root", tmp / "dev", [TpuChipSpec("0000:00:04.0")])
    return {"sysfs_root": tmp / "root", "dev_root": tmp / "dev"}


def _mock(tmp: Path) -> dict[str, Any]:
    path = tmp / "mock.toml"
    path.write_text(tomli_w.dumps({"devices": [{"kind": "rocm", "memory": "8GiB"}]}))
    return {"devices": path}


@pytest.mark.parametrize(
    ("name", "settings", "slot"),
    [
        ("cuda", _cuda, "cuda.device"),
        ("rocm", _rocm, "rocm.device"),
        ("tpu", _tpu, "tpu.device"),
        ("mock", _mock, "rocm.device"),
    ],
)
def test_each_plugin_builds_from_its_settings_and_finds_its_device(
    tmp_path: Path, name: str, settings: Callable[[Path], dict[str, Any]], slot: str
) -> None:
    factory = load_group(ACCELERATORS, AcceleratorPlugin)[name]
    plugin = factory(factory.Settings(**settings(tmp_path)))
    fp = plugin.fingerprint()
    assert fp.plugin == name
    assert [d.slot for d in fp.devices] == [slot]
    assert [s.name for s in fp.slot_types] == [slot]
    assert isinstance(plugin.stats(), list)


@pytest.mark.parametrize("member", sorted(protocol_members(NvmlApi)))
def test_the_fake_nvml_and_real_pynvml_share_every_name_the_plugin_uses(member: str) -> None:
    assert hasattr(pynvml, member), (
        f"pynvml has no {member}: the plugin calls a name that does not exist"
    )
    assert hasattr(FakeNvml, member), f"the fake NVML lacks {member}"
