"""Read the node's NVIDIA devices from NVML: whole GPUs, or their MIG instances.

One :class:`GpuRecord` per schedulable device. A GPU with MIG enabled is not itself
schedulable (the driver refuses plain CUDA contexts on it); each of its MIG instances
is, with its own UUID, memory and SM count. A GPU that answers some calls and fails
others is kept and marked unhealthy with the error; one whose UUID cannot even be read
cannot be named, so it becomes a *problem* line in the fingerprint's detail (and, if it
was seen before, the plugin's lost-device memory reports it unhealthy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from plugins.accelerators.cuda.nvml import NvmlApi

__all__ = ["Discovery", "GpuRecord", "discover"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GpuRecord:
    """One schedulable CUDA device (a GPU or a MIG instance) as NVML describes it."""

    uuid: str
    name: str
    memory: int
    multiprocessors: int
    pci_bus_id: str
    minor: int  # /dev/nvidia<minor> of the (parent) GPU
    index: int  # NVML index of the (parent) GPU
    handle: object = field(compare=False, repr=False)
    mig_index: int | None = None  # position among the parent's MIG devices
    parent_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    health_reason: str | None = None  # None: healthy

    @property
    def is_mig(self) -> bool:
        return self.mig_index is not None


@dataclass(slots=True)
class Discovery:
    driver_version: str
    records: list[GpuRecord]
    problems: list[str]


def discover(nvml: NvmlApi) -> Discovery:
    """Every schedulable device; NVML must already be initialised."""
    records: list[GpuRecord] = []
    problems: list[str] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = nvml.nvmlDeviceGetUUID(handle)
        except nvml.NVMLError as exc:
            problems.append(f"GPU {index}: {exc}")
            continue
        gpu = _read_gpu(nvml, index, handle, uuid)
        if gpu.health_reason is None and _mig_enabled(nvml, handle):
            migs = _read_migs(nvml, gpu)
            if not migs:
                problems.append(f"GPU {index} ({uuid}): MIG is enabled but has no instances")
            records.extend(migs)
        else:
            records.append(gpu)
    try:
        version = nvml.nvmlSystemGetDriverVersion()
    except nvml.NVMLError:
        version = "unknown"
    return Discovery(version, records, problems)


def _optional(nvml: NvmlApi, call: Callable[[], T], default: T) -> T:
    """A call some GPUs do not support (no ECC, old architectures): default then."""
    try:
        return call()
    except nvml.NVMLError_NotSupported:
        return default


def _read_gpu(nvml: NvmlApi, index: int, handle: object, uuid: str) -> GpuRecord:
    try:
        pci = nvml.nvmlDeviceGetPciInfo(handle).busId
        record = GpuRecord(
            uuid=uuid,
            name=nvml.nvmlDeviceGetName(handle),
            memory=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
            multiprocessors=_optional(
                nvml, lambda: int(nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount), 0
            ),
            pci_bus_id=pci.decode() if isinstance(pci, bytes) else str(pci),
            minor=nvml.nvmlDeviceGetMinorNumber(handle),
            index=index,
            handle=handle,
        )
        ecc = _optional(
            nvml,
            lambda: int(
                nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            ),
            0,
        )
    except nvml.NVMLError as exc:
        return GpuRecord(uuid, "unknown", 0, 0, "", -1, index, handle, health_reason=f"NVML: {exc}")
    if ecc > 0:
        return _with_reason(record, f"{ecc} uncorrected ECC errors since the driver loaded")
    return record


def _mig_enabled(nvml: NvmlApi, handle: object) -> bool:
    current = _optional(nvml, lambda: nvml.nvmlDeviceGetMigMode(handle)[0], 0)
    return bool(current == nvml.NVML_DEVICE_MIG_ENABLE)


def _read_migs(nvml: NvmlApi, gpu: GpuRecord) -> list[GpuRecord]:
    migs: list[GpuRecord] = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(gpu.handle)):
        try:
            handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
        except nvml.NVMLError_NotFound:
            continue  # an empty slot: fewer instances than the maximum
        try:
            migs.append(_read_mig(nvml, gpu, slot, handle))
        except nvml.NVMLError as exc:
            migs.append(
                _with_reason(
                    GpuRecord(
                        f"{gpu.uuid}/mig{slot}",
                        gpu.name,
                        0,
                        0,
                        gpu.pci_bus_id,
                        gpu.minor,
                        gpu.index,
                        handle,
                        slot,
                        gpu.uuid,
                    ),
                    f"NVML: {exc}",
                )
            )
    return migs


def _read_mig(nvml: NvmlApi, gpu: GpuRecord, slot: int, handle: object) -> GpuRecord:
    return GpuRecord(
        uuid=nvml.nvmlDeviceGetUUID(handle),
        name=nvml.nvmlDeviceGetName(handle),
        memory=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        multiprocessors=int(nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount),
        pci_bus_id=gpu.pci_bus_id,
        minor=gpu.minor,
        index=gpu.index,
        handle=handle,
        mig_index=slot,
        parent_uuid=gpu.uuid,
        gpu_instance_id=nvml.nvmlDeviceGetGpuInstanceId(handle),
        compute_instance_id=nvml.nvmlDeviceGetComputeInstanceId(handle),
    )


def _with_reason(record: GpuRecord, reason: str) -> GpuRecord:
    return replace(record, health_reason=reason)
