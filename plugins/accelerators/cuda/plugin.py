"""The cuda accelerator plugin: NVIDIA GPUs through NVML.

``fingerprint()`` lists GPUs (or MIG instances) by UUID with memory, SM count, NUMA
node (PCI bus id -> sysfs) and health, and offers ``cuda.device`` (discrete mode) or
``cuda.shares`` (fractional mode, ``shares_per_device`` per GPU). ``reserve()`` turns an
allocation into the environment every CUDA session sees (:mod:`..sharing`), the CDI
devices or ``/dev/nvidia*`` nodes, and, for shares, the limits of the node's fraction
enforcement. ``stats()`` reads utilisation and memory in use.

On a machine without the NVIDIA driver the plugin fingerprints zero devices and says
so in the detail; it never raises out of ``fingerprint()`` or ``stats()``.
"""

from __future__ import annotations

import logging
from typing import ClassVar

from pydantic import BaseModel

from plugins.accelerators.base import (
    Allocation,
    Device,
    DeviceStats,
    Enforcement,
    Fingerprint,
    Reservation,
    ReservationError,
)
from plugins.accelerators.checks import check_allocation
from plugins.accelerators.cuda.cdi import CDI_KIND, CdiSpecs, scan_cdi
from plugins.accelerators.cuda.discover import Discovery, GpuRecord, discover
from plugins.accelerators.cuda.enforcement import detect_enforcement
from plugins.accelerators.cuda.nvml import NvmlApi, load_nvml
from plugins.accelerators.cuda.settings import CudaSettings
from plugins.accelerators.health import LostDevices
from plugins.accelerators.sharing import (
    SHARES_SLOT,
    Grant,
    grants_for,
    mps_env,
    preload_env,
    refuse_unenforced,
    session_env,
)
from plugins.accelerators.sysfs import pci_numa_node
from plugins.common import Mount

__all__ = ["CudaPlugin"]

log = logging.getLogger(__name__)
#: node-wide device nodes given with every GPU when they exist (CUDA needs UVM)
_OPTIONAL_NODES = ("nvidia-uvm", "nvidia-uvm-tools")


class CudaPlugin:
    """NVIDIA GPUs, whole or in shares; see the module docstring."""

    name: ClassVar[str] = "cuda"
    #: typed as the contract declares it (a ClassVar in a Protocol is invariant)
    Settings: ClassVar[type[BaseModel]] = CudaSettings

    def __init__(self, settings: CudaSettings | None = None, *, nvml: NvmlApi | None = None):
        self.settings = settings if settings is not None else CudaSettings()
        self._nvml = nvml if nvml is not None else load_nvml(self.settings.fake_nvml)
        self._initialised = False
        self._lost = LostDevices()
        self._records: dict[str, GpuRecord] = {}
        self._last: Fingerprint | None = None

    # -- fingerprint ------------------------------------------------------------------
    def fingerprint(self) -> Fingerprint:
        problem = self._init()
        discovery: Discovery | None = None
        if problem is None:
            try:
                discovery = discover(self._nvml)
            except self._nvml.NVMLError as exc:
                self._shutdown()  # start afresh next time
                problem = f"NVML failed while listing GPUs: {exc}"
        if discovery is None:
            devices = self._lost.merge([])
            self._records = {}
            fp = Fingerprint(self.name, devices, [], None, detail=f"{problem}: no CUDA devices")
        else:
            fp = self._fingerprint(discovery)
        self._last = fp
        return fp

    def _fingerprint(self, discovery: Discovery) -> Fingerprint:
        settings = self.settings
        enforcement: Enforcement | None = None
        notes = [f"driver {discovery.driver_version}", f"{len(discovery.records)} devices"]
        if settings.mode == "fractional":
            enforcement, sentence = detect_enforcement(settings)
            notes.append(sentence)
            if settings.fractions_refused(enforcement):
                notes.append("only whole devices are given (allow_unenforced_fractions is off)")
        cdi = scan_cdi(settings.cdi_dirs)
        notes.append(f"CDI spec {', '.join(map(str, cdi.files))}" if cdi else "no CDI spec")
        notes.extend(discovery.problems)
        self._records = {r.uuid: r for r in discovery.records}
        devices = self._lost.merge([self._device(r) for r in discovery.records])
        return Fingerprint(
            self.name,
            devices,
            [settings.slot_type(enforcement)],
            enforcement,
            detail="; ".join(notes),
        )

    def _device(self, record: GpuRecord) -> Device:
        attributes = {
            "index": str(record.index),
            "minor": str(record.minor),
            "pci_bus_id": record.pci_bus_id,
        }
        if record.is_mig:
            attributes.update(
                mig="true",
                parent=str(record.parent_uuid),
                mig_index=str(record.mig_index),
                gpu_instance_id=str(record.gpu_instance_id),
                compute_instance_id=str(record.compute_instance_id),
            )
        if record.health_reason:
            attributes["health_reason"] = record.health_reason
        numa = (
            pci_numa_node(self.settings.sysfs_root, record.pci_bus_id)
            if record.pci_bus_id
            else None
        )
        return Device(
            id=record.uuid,
            kind="cuda",
            model=record.name,
            memory=record.memory,
            processing_units=record.multiprocessors,
            numa_node=numa,
            slot=self.settings.slot,
            capacity=self.settings.capacity,
            health="unhealthy" if record.health_reason else "healthy",
            attributes=attributes,
        )

    # -- reserve ----------------------------------------------------------------------
    def reserve(self, allocation: Allocation) -> Reservation:
        fp = self._last if self._last is not None else self.fingerprint()
        devices = {d.id: d for d in fp.devices}
        slot_type = next((s for s in fp.slot_types if s.name == allocation.slot), None)
        refuse_unenforced(self.settings, allocation, fp.enforcement)
        check_allocation(allocation, devices, slot_type)
        order = sorted(allocation.amounts, key=self._order_key)
        grants = grants_for(allocation, devices, self.settings.shares_per_device, order)
        reservation = Reservation(env=session_env(grants, allocation.slot, fp.enforcement))
        reservation = reservation.merge(self._access(grants))
        if allocation.slot == SHARES_SLOT:
            reservation = reservation.merge(self._limits(grants, fp.enforcement))
        return reservation

    def _order_key(self, device_id: str) -> tuple[int, int]:
        record = self._records.get(device_id)
        if record is None:
            return (1 << 30, 0)  # unknown ids sort last; check_allocation refuses them
        return (record.index, -1 if record.mig_index is None else record.mig_index)

    def _access(self, grants: list[Grant]) -> Reservation:
        """CDI names when the node has an NVIDIA CDI spec, else the device nodes."""
        cdi = scan_cdi(self.settings.cdi_dirs)
        records = [self._records[g.device.id] for g in grants]
        if cdi:
            return Reservation(cdi_devices=[f"{CDI_KIND}={_cdi_name(r, cdi)}" for r in records])
        mig = [r.uuid for r in records if r.is_mig]
        if mig:
            raise ReservationError(
                f"MIG instance {mig[0]} needs a CDI spec (run `nvidia-ctk cdi generate "
                "--output=/etc/cdi/nvidia.yaml`); device nodes alone cannot expose it"
            )
        dev = self.settings.dev_root
        nodes = [dev / f"nvidia{minor}" for minor in dict.fromkeys(r.minor for r in records)]
        nodes.append(dev / "nvidiactl")
        for path in nodes:
            if not path.exists():
                raise ReservationError(f"device node {path} does not exist on this node")
        nodes.extend(dev / n for n in _OPTIONAL_NODES if (dev / n).exists())
        return Reservation(devices=[str(p) for p in nodes])

    def _limits(self, grants: list[Grant], enforcement: Enforcement | None) -> Reservation:
        settings = self.settings
        if enforcement == "mps":
            pipe = str(settings.mps_pipe_dir)
            mounts = [Mount(pipe, pipe)]
            if settings.mps_shm_dir is not None:
                mounts.append(Mount(str(settings.mps_shm_dir), "/dev/shm"))
            return Reservation(
                env={"CUDA_MPS_PIPE_DIRECTORY": pipe, **mps_env(grants)}, mounts=mounts
            )
        if enforcement == "preload" and settings.preload_library is not None:
            library = settings.preload_library
            target = f"{settings.preload_target_dir.rstrip('/')}/{library.name}"
            return Reservation(
                env={"LD_PRELOAD": target, **preload_env(grants)},
                mounts=[Mount(str(library), target, read_only=True)],
            )
        return Reservation()

    # -- stats ------------------------------------------------------------------------
    def stats(self) -> list[DeviceStats]:
        if self._last is None:
            self.fingerprint()
        result: list[DeviceStats] = []
        nvml = self._nvml
        for record in self._records.values():
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(record.handle)
                try:
                    busy = float(nvml.nvmlDeviceGetUtilizationRates(record.handle).gpu)
                except nvml.NVMLError_NotSupported:
                    busy = 0.0  # MIG instances: NVML reports no utilisation per instance
            except nvml.NVMLError as exc:
                log.debug("cuda stats: %s: %s", record.uuid, exc)
                continue  # the next fingerprint marks it
            result.append(DeviceStats(record.uuid, busy, int(memory.used), int(memory.total)))
        return result

    # -- NVML lifecycle ---------------------------------------------------------------
    def _init(self) -> str | None:
        """None when NVML is ready, else why not (in words)."""
        if self._initialised:
            return None
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError_LibraryNotFound:
            return "NVIDIA driver not found (libnvidia-ml.so.1 cannot be loaded)"
        except nvml.NVMLError_DriverNotLoaded:
            return "NVIDIA kernel driver not loaded"
        except nvml.NVMLError as exc:
            return f"NVML failed to initialise: {exc}"
        self._initialised = True
        return None

    def _shutdown(self) -> None:
        if self._initialised:
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                log.warning("cuda: nvmlShutdown failed: %s", exc)

    def close(self) -> None:
        """Release NVML (the worker calls this when it stops)."""
        self._shutdown()


def _cdi_name(record: GpuRecord, cdi: CdiSpecs) -> str:
    index = f"{record.index}:{record.mig_index}" if record.is_mig else str(record.index)
    for candidate in (record.uuid, index):
        if candidate in cdi.names:
            return candidate
    raise ReservationError(
        f"the CDI spec ({', '.join(map(str, cdi.files))}) names neither {record.uuid} nor "
        f"index {index}; regenerate it with `nvidia-ctk cdi generate`"
    )
