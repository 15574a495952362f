"""A fake NVML: a device table behind the pynvml calls the cuda plugin makes.

Set ``JOBGATE_CUDA_FAKE_NVML=/path/table.toml`` (or ``.json``) and the cuda plugin talks
to this instead of ``libnvidia-ml``: the whole plugin (MIG, NUMA through sysfs, CDI,
MPS detection, health) runs on machines without a GPU, which is how its tests run. It
implements *only* what the plugin calls, with pynvml's names, return shapes
(``.total``, ``.busId`` as bytes, ``.multiprocessorCount`` ...) and exception classes,
and it refuses calls before ``nvmlInit`` as the real library does. A table::

    driver = "loaded"               # or "missing" (no libnvidia-ml), "not_loaded"
    driver_version = "550.54.15"

    [[gpus]]
    uuid = "GPU-8a1c..."
    name = "NVIDIA A100-SXM4-40GB"
    memory = "40GiB"
    multiprocessors = 108
    pci_bus_id = "00000000:3B:00.0"
    minor = 0
    ecc_uncorrected = 0             # leave out: ECC not supported on this GPU
    utilization = 12                # percent, for stats
    memory_used = "1GiB"
    lost = false                    # true: every call on it raises NVMLError_GpuIsLost
    failing = []                    # NVML function names that raise NVMLError_Unknown
    mig_enabled = false

    [[gpus.mig]]                    # MIG instances, when mig_enabled
    uuid = "MIG-..."
    name = "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    memory = "4864MiB"
    multiprocessors = 14

The table is plain data (:class:`FakeTable`), so a test can change it between calls,
for instance to lose a GPU.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from plugins.resources import InvalidResource, parse_size

__all__ = [
    "FakeGpu",
    "FakeMig",
    "FakeNvml",
    "FakeNvmlTableError",
    "FakeTable",
    "NVMLError",
]

# ---- pynvml's constants and exception classes (same names, same meaning) -------------
NVML_DEVICE_MIG_ENABLE = 1
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0


class NVMLError(Exception):
    """Base of the fake's errors, like ``pynvml.NVMLError`` (``.value`` is NVML's code)."""

    value = 999
    text = "Unknown Error"

    def __str__(self) -> str:
        return self.text


class NVMLError_Uninitialized(NVMLError):
    value, text = 1, "Uninitialized"


class NVMLError_InvalidArgument(NVMLError):
    value, text = 2, "Invalid Argument"


class NVMLError_NotSupported(NVMLError):
    value, text = 3, "Not Supported"


class NVMLError_NotFound(NVMLError):
    value, text = 6, "Not Found"


class NVMLError_DriverNotLoaded(NVMLError):
    value, text = 9, "Driver Not Loaded"


class NVMLError_LibraryNotFound(NVMLError):
    value, text = 12, "NVML Shared Library Not Found"


class NVMLError_GpuIsLost(NVMLError):
    value, text = 15, "GPU is lost"


class NVMLError_Unknown(NVMLError):
    value, text = 999, "Unknown Error"


# ---- the table ------------------------------------------------------------------------
class FakeNvmlTableError(ValueError):
    """A fake NVML table that cannot be read; the message names the file and the field."""


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    @field_validator("memory", "memory_used", mode="before", check_fields=False)
    @classmethod
    def _size(cls, value: object) -> int:
        try:
            return int(parse_size(value))  # type: ignore[arg-type]
        except InvalidResource as exc:
            raise ValueError(exc.message) from None


class FakeMig(_Row):
    uuid: str
    name: str
    memory: int
    multiprocessors: int = 0
    gpu_instance_id: int = 0
    compute_instance_id: int = 0
    memory_used: int = 0


class FakeGpu(_Row):
    uuid: str
    name: str = "NVIDIA Fake GPU"
    memory: int
    multiprocessors: int = 0
    pci_bus_id: str
    minor: int
    ecc_uncorrected: int | None = None
    utilization: int = Field(default=0, ge=0, le=100)
    memory_used: int = 0
    lost: bool = False
    failing: list[str] = Field(default_factory=list)
    mig_enabled: bool = False
    max_mig_devices: int = 7
    mig: list[FakeMig] = Field(default_factory=list)


class FakeTable(_Row):
    driver: Literal["loaded", "missing", "not_loaded"] = "loaded"
    driver_version: str = "550.54.15"
    gpus: list[FakeGpu] = Field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> FakeTable:
        """Read a TOML or JSON table; every problem is a FakeNvmlTableError naming *path*."""
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise FakeNvmlTableError(f"fake NVML table {path}: {exc.strerror}") from None
        try:
            data: Any = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            raise FakeNvmlTableError(f"fake NVML table {path}: not valid: {exc}") from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise FakeNvmlTableError(f"fake NVML table {path}: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" + (
        f" ({len(exc.errors())} errors)" if exc.error_count() > 1 else ""
    )


# ---- return shapes --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Handle:
    gpu: int
    mig: int | None = None


@dataclass(frozen=True, slots=True)
class _Memory:
    total: int
    used: int
    free: int


@dataclass(frozen=True, slots=True)
class _Pci:
    busId: bytes


@dataclass(frozen=True, slots=True)
class _Attributes:
    multiprocessorCount: int


@dataclass(frozen=True, slots=True)
class _Utilization:
    gpu: int
    memory: int


class FakeNvml:
    """The pynvml functions the cuda plugin uses, answered from a :class:`FakeTable`."""

    NVMLError: type[Exception] = NVMLError
    NVMLError_NotSupported: type[Exception] = NVMLError_NotSupported
    NVMLError_NotFound: type[Exception] = NVMLError_NotFound
    NVMLError_LibraryNotFound: type[Exception] = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded: type[Exception] = NVMLError_DriverNotLoaded
    NVMLError_GpuIsLost: type[Exception] = NVMLError_GpuIsLost
    NVML_DEVICE_MIG_ENABLE: int = NVML_DEVICE_MIG_ENABLE
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC: int = NVML_VOLATILE_ECC

    def __init__(self, table: FakeTable) -> None:
        self.table = table
        self.init_count = 0  # nvmlInit minus nvmlShutdown, as NVML counts them

    @classmethod
    def from_file(cls, path: Path) -> FakeNvml:
        return cls(FakeTable.load(path))

    # -- library ----------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.table.driver == "missing":
            raise NVMLError_LibraryNotFound()
        if self.table.driver == "not_loaded":
            raise NVMLError_DriverNotLoaded()
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._ready()
        self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._ready()
        return self.table.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._ready()
        return len(self.table.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._ready()
        if not 0 <= index < len(self.table.gpus):
            raise NVMLError_InvalidArgument()
        return _Handle(index)

    # -- per device -------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: object) -> str:
        return self._row(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: object) -> str:
        return self._row(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> _Memory:
        row = self._row(handle, "nvmlDeviceGetMemoryInfo")
        return _Memory(row.memory, row.memory_used, row.memory - row.memory_used)

    def nvmlDeviceGetAttributes(self, handle: object) -> _Attributes:
        return _Attributes(self._row(handle, "nvmlDeviceGetAttributes").multiprocessors)

    def nvmlDeviceGetPciInfo(self, handle: object) -> _Pci:
        return _Pci(self._gpu(handle, "nvmlDeviceGetPciInfo").pci_bus_id.encode())

    def nvmlDeviceGetMinorNumber(self, handle: object) -> int:
        return self._gpu(handle, "nvmlDeviceGetMinorNumber").minor

    def nvmlDeviceGetMigMode(self, handle: object) -> list[int]:
        mode = int(self._gpu(handle, "nvmlDeviceGetMigMode").mig_enabled)
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: object) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetMaxMigDeviceCount")
        return gpu.max_mig_devices if gpu.mig_enabled else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: object, index: int) -> _Handle:
        gpu = self._gpu(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        if not gpu.mig_enabled:
            raise NVMLError_NotSupported()
        if not 0 <= index < len(gpu.mig):
            raise NVMLError_NotFound()
        return _Handle(self._handle(handle).gpu, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: object) -> int:
        return self._mig(handle, "nvmlDeviceGetGpuInstanceId").gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: object) -> int:
        return self._mig(handle, "nvmlDeviceGetComputeInstanceId").compute_instance_id

    def nvmlDeviceGetTotalEccErrors(
        self, handle: object, error_type: int, counter_type: int
    ) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        if self._handle(handle).mig is not None or gpu.ecc_uncorrected is None:
            raise NVMLError_NotSupported()
        if (error_type, counter_type) != (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC):
            return 0
        return gpu.ecc_uncorrected

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> _Utilization:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        if self._handle(handle).mig is not None:
            raise NVMLError_NotSupported()  # NVML does not report utilisation per MIG instance
        return _Utilization(gpu.utilization, 0)

    # -- internals --------------------------------------------------------------------
    def _ready(self) -> None:
        if self.init_count <= 0:
            raise NVMLError_Uninitialized()

    def _handle(self, handle: object) -> _Handle:
        self._ready()
        if not isinstance(handle, _Handle) or not 0 <= handle.gpu < len(self.table.gpus):
            raise NVMLError_InvalidArgument()
        return handle

    def _gpu(self, handle: object, call: str) -> FakeGpu:
        gpu = self.table.gpus[self._handle(handle).gpu]
        if gpu.lost:
            raise NVMLError_GpuIsLost()
        if call in gpu.failing:
            raise NVMLError_Unknown()
        return gpu

    def _mig(self, handle: object, call: str) -> FakeMig:
        gpu, mig = self._gpu(handle, call), self._handle(handle).mig
        if mig is None:
            raise NVMLError_InvalidArgument()  # a MIG-only call on a whole GPU
        return gpu.mig[mig]

    def _row(self, handle: object, call: str) -> FakeGpu | FakeMig:
        gpu, mig = self._gpu(handle, call), self._handle(handle).mig
        return gpu if mig is None else gpu.mig[mig]
