"""The fake NVML behaves like pynvml where the plugin relies on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml
import pytest

from plugins.accelerators import fake_nvml
from plugins.accelerators.fake_nvml import FakeNvml, FakeNvmlTableError, FakeTable

GIB = 1024**3
GPU = {"uuid": "GPU-a", "memory": "16GiB", "pci_bus_id": "00000000:3B:00.0", "minor": 3}
MIG = {"uuid": "MIG-a", "name": "MIG 1g.5gb", "memory": "5GiB", "multiprocessors": 14}


def _nvml(*gpus: dict[str, Any], **table: Any) -> FakeNvml:
    nvml = FakeNvml(FakeTable.model_validate({"gpus": list(gpus), **table}))
    if table.get("driver", "loaded") == "loaded":
        nvml.nvmlInit()
    return nvml


@pytest.mark.parametrize(
    "name",
    [
        "NVMLError_Uninitialized",
        "NVMLError_InvalidArgument",
        "NVMLError_NotSupported",
        "NVMLError_NotFound",
        "NVMLError_DriverNotLoaded",
        "NVMLError_LibraryNotFound",
        "NVMLError_GpuIsLost",
        "NVMLError_Unknown",
    ],
)
def test_error_classes_carry_pynvml_codes_and_texts(name: str) -> None:
    fake, real = getattr(fake_nvml, name), getattr(pynvml, name)
    assert issubclass(fake, fake_nvml.NVMLError)
    assert fake.value == real(0).value
    assert str(fake()) == pynvml.NVMLError._errcode_to_string[real(0).value]


@pytest.mark.parametrize(
    "constant",
    ["NVML_DEVICE_MIG_ENABLE", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"],
)
def test_constants_match_pynvml(constant: str) -> None:
    assert getattr(FakeNvml, constant) == getattr(pynvml, constant)


def test_calls_before_init_are_refused_as_nvml_does() -> None:
    nvml = FakeNvml(FakeTable.model_validate({"gpus": [GPU]}))
    with pytest.raises(fake_nvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    nvml.nvmlInit()
    nvml.nvmlShutdown()
    assert nvml.nvmlDeviceGetCount() == 1  # init is reference counted
    nvml.nvmlShutdown()
    with pytest.raises(fake_nvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()


@pytest.mark.parametrize(
    ("driver", "error"),
    [("missing", "NVMLError_LibraryNotFound"), ("not_loaded", "NVMLError_DriverNotLoaded")],
)
def test_driver_states(driver: str, error: str) -> None:
    with pytest.raises(getattr(fake_nvml, error)):
        _nvml(GPU, driver=driver).nvmlInit()


def test_return_shapes_are_pynvml_shapes() -> None:
    nvml = _nvml({**GPU, "memory_used": "4GiB", "multiprocessors": 108, "utilization": 9})
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    assert (memory.total, memory.used, memory.free) == (16 * GIB, 4 * GIB, 12 * GIB)
    assert nvml.nvmlDeviceGetPciInfo(handle).busId == b"00000000:3B:00.0"
    assert nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount == 108
    assert nvml.nvmlDeviceGetUtilizationRates(handle).gpu == 9
    assert nvml.nvmlDeviceGetMinorNumber(handle) == 3
    assert nvml.nvmlDeviceGetMigMode(handle) == [0, 0]
    with pytest.raises(fake_nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(1)


def test_per_device_failures() -> None:
    nvml = _nvml({**GPU, "lost": True}, {**GPU, "uuid": "GPU-b", "failing": ["nvmlDeviceGetName"]})
    with pytest.raises(fake_nvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(0))
    second = nvml.nvmlDeviceGetHandleByIndex(1)
    assert nvml.nvmlDeviceGetUUID(second) == "GPU-b"
    with pytest.raises(fake_nvml.NVMLError_Unknown):
        nvml.nvmlDeviceGetName(second)
    with pytest.raises(fake_nvml.NVMLError_NotSupported):  # no ecc_uncorrected in the table
        nvml.nvmlDeviceGetTotalEccErrors(second, 1, 0)


def test_mig_handles() -> None:
    nvml = _nvml({**GPU, "mig_enabled": True, "mig": [MIG]})
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetMigMode(gpu) == [1, 1]
    assert nvml.nvmlDeviceGetMaxMigDeviceCount(gpu) == 7
    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    assert (nvml.nvmlDeviceGetUUID(mig), nvml.nvmlDeviceGetMemoryInfo(mig).total) == (
        "MIG-a",
        5 * GIB,
    )
    with pytest.raises(fake_nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 1)
    with pytest.raises(fake_nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetGpuInstanceId(gpu)  # a MIG-only call on the whole GPU
    with pytest.raises(fake_nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetUtilizationRates(mig)


def test_toml_and_json_tables_are_the_same(tmp_path: Path) -> None:
    (tmp_path / "t.toml").write_text(
        '[[gpus]]\nuuid = "GPU-a"\nmemory = "16GiB"\npci_bus_id = "00000000:3B:00.0"\nminor = 3\n'
    )
    (tmp_path / "t.json").write_text(
        '{"gpus": [{"uuid": "GPU-a", "memory": 17179869184,'
        ' "pci_bus_id": "00000000:3B:00.0", "minor": 3}]}'
    )
    assert FakeTable.load(tmp_path / "t.toml") == FakeTable.load(tmp_path / "t.json")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("t.toml", "[[gpus]\n", "not valid"),
        ("t.json", "{", "not valid"),
        (
            "t.toml",
            '[[gpus]]\nmemory = "1g"\npci_bus_id = "x"\nminor = 0\n',
            "gpus.0.uuid: Field required",
        ),
        (
            "t.toml",
            '[[gpus]]\nuuid = "a"\nmemory = "lots"\npci_bus_id = "x"\nminor = 0\n',
            "gpus.0.memory: Value error, not a size",
        ),
        (
            "t.toml",
            'driver = "flaky"\n',
            "driver: Input should be 'loaded', 'missing' or 'not_loaded'",
        ),
        ("t.toml", "colour = 1\n", "colour: Extra inputs are not permitted"),
    ],
)
def test_bad_tables_name_the_file_and_the_field(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(FakeNvmlTableError) as caught:
        FakeTable.load(tmp_path / name)
    assert str(caught.value).startswith(f"fake NVML table {tmp_path / name}: ")
    assert message in str(caught.value)


def test_a_missing_table(tmp_path: Path) -> None:
    with pytest.raises(FakeNvmlTableError, match="No such file or directory"):
        FakeNvml.from_file(tmp_path / "absent.toml")
