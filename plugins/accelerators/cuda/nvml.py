"""The slice of NVML the cuda plugin uses, as a Protocol, and where it comes from.

Two things satisfy :class:`NvmlApi`: the real ``pynvml`` module (NVIDIA's own bindings,
the ``nvidia-ml-py`` distribution) and :class:`plugins.accelerators.fake_nvml.FakeNvml`.
Listing the calls here keeps the fake honest: it implements exactly these, and
anything new the plugin starts calling must be added to both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

__all__ = ["NvmlApi", "load_nvml"]


class _Memory(Protocol):
    @property
    def total(self) -> int: ...
    @property
    def used(self) -> int: ...


class _Pci(Protocol):
    @property
    def busId(self) -> bytes | str: ...


class _Attributes(Protocol):
    @property
    def multiprocessorCount(self) -> int: ...


class _Utilization(Protocol):
    @property
    def gpu(self) -> int: ...


class NvmlApi(Protocol):  # names are NVML's, hence noqa N802 throughout
    NVMLError: type[Exception]
    NVMLError_NotSupported: type[Exception]
    NVMLError_NotFound: type[Exception]
    NVMLError_LibraryNotFound: type[Exception]
    NVMLError_DriverNotLoaded: type[Exception]
    NVMLError_GpuIsLost: type[Exception]
    NVML_DEVICE_MIG_ENABLE: int
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int
    NVML_VOLATILE_ECC: int

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> object: ...
    def nvmlDeviceGetUUID(self, handle: object, /) -> str: ...
    def nvmlDeviceGetName(self, handle: object, /) -> str: ...
    def nvmlDeviceGetMemoryInfo(self, handle: object, /) -> _Memory: ...
    def nvmlDeviceGetAttributes(self, handle: object, /) -> _Attributes: ...
    def nvmlDeviceGetPciInfo(self, handle: object, /) -> _Pci: ...
    def nvmlDeviceGetMinorNumber(self, handle: object, /) -> int: ...
    def nvmlDeviceGetMigMode(self, handle: object, /) -> list[int]: ...
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: object, /) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: object, index: int, /) -> object: ...
    def nvmlDeviceGetGpuInstanceId(self, handle: object, /) -> int: ...
    def nvmlDeviceGetComputeInstanceId(self, handle: object, /) -> int: ...
    def nvmlDeviceGetTotalEccErrors(
        self, handle: object, error_type: int, counter_type: int, /
    ) -> int: ...
    def nvmlDeviceGetUtilizationRates(self, handle: object, /) -> _Utilization: ...


def load_nvml(fake_table: Path | None) -> NvmlApi:
    """The fake NVML over *fake_table* when given, else the real ``pynvml`` module.

    Importing pynvml never touches the driver (``nvmlInit`` does), so this works on
    machines without a GPU; the plugin handles the library being absent at init.
    """
    if fake_table is not None:
        from plugins.accelerators.fake_nvml import FakeNvml

        return FakeNvml.from_file(fake_table)
    import pynvml

    api: NvmlApi = pynvml
    return api
