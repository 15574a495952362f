"""The mock accelerator plugin: CUDA, ROCm and TPU devices from a TOML file.

So the whole stack - scheduler, fractions, reservations, the environment sessions
see - runs on dev laptops, in CI and in scale tests without any accelerator. The file
is named by ``JOBGATE_MOCK_DEVICES``::

    [[devices]]
    kind = "cuda"                 # cuda | rocm | tpu
    model = "Mock GPU 8GB"
    memory = "8GiB"
    numa_node = 0
    count = 2                     # optional, default 1
    # processing_units, health ("healthy" | "unhealthy"), utilization, memory_used

    [cuda]                        # applies to every mock cuda device
    mode = "fractional"           # "fractional" offers cuda.shares, "discrete" cuda.device
    shares_per_device = 2.0
    quantum = 0.1
    enforcement = "none"          # "none" | "mps" | "preload": what the node claims
    allow_unenforced_fractions = true   # default here, since a laptop enforces nothing

Devices are named ``mock-<kind>-<n>``. Reservations carry environment only, never a
device node or mount: the same variables a real device of that kind would give
(``CUDA_VISIBLE_DEVICES``, ``JOBGATE_CUDA_SHARES``, ``JOBGATE_CUDA_MEMORY_BYTES``, the
MPS or preload limits the claimed enforcement would set, ``ROCR_VISIBLE_DEVICES``,
``TPU_VISIBLE_CHIPS`` ...), with the mock ids in them so nobody mistakes them for real
ones. The file is read once, when the plugin is built; a bad file is a
:class:`MockConfigError` naming the file and the field.
"""

from __future__ import annotations

import tomllib
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from plugins.accelerators.base import (
    Allocation,
    Device,
    DeviceStats,
    Enforcement,
    Fingerprint,
    Health,
    Reservation,
    SlotType,
)
from plugins.accelerators.checks import check_allocation
from plugins.accelerators.rocm import ROCM_SLOT
from plugins.accelerators.sharing import (
    SHARES_SLOT,
    SharingFields,
    grants_for,
    mps_env,
    preload_env,
    refuse_unenforced,
    session_env,
)
from plugins.accelerators.tpu import TPU_SLOT, tpu_env
from plugins.resources import InvalidResource, parse_size

__all__ = ["MockConfigError", "MockFile", "MockPlugin", "MockSettings"]

Kind = Literal["cuda", "rocm", "tpu"]
_DEFAULT_MODEL = {"cuda": "Mock GPU", "rocm": "Mock AMD GPU", "tpu": "Mock TPU"}


class MockConfigError(ValueError):
    """A mock device file that is missing or wrong; the message says where and what."""


class MockSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBGATE_MOCK_", extra="forbid")

    #: the TOML file of mock devices (JOBGATE_MOCK_DEVICES)
    devices: Path | None = None


class MockDeviceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Kind
    model: str = ""
    memory: int
    numa_node: int | None = Field(default=None, ge=0)
    count: int = Field(default=1, ge=1, le=4096)
    processing_units: int = Field(default=0, ge=0)
    health: Health = "healthy"
    utilization: float = Field(default=0.0, ge=0, le=100)
    memory_used: int = 0

    @field_validator("memory", "memory_used", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int:
        try:
            return int(parse_size(value))
        except InvalidResource as exc:
            raise ValueError(exc.message) from None


class MockCudaSection(SharingFields):
    model_config = ConfigDict(extra="forbid")

    enforcement: Enforcement = "none"
    allow_unenforced_fractions: bool = True


class MockFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    devices: list[MockDeviceSpec] = Field(default_factory=list)
    cuda: MockCudaSection = Field(default_factory=MockCudaSection)

    @classmethod
    def load(cls, path: Path) -> MockFile:
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise MockConfigError(f"mock devices file {path}: {exc.strerror}") from None
        try:
            data = tomllib.loads(raw)
        except tomllib.TOMLDecodeError as exc:
            raise MockConfigError(f"mock devices file {path}: not valid TOML: {exc}") from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise MockConfigError(f"mock devices file {path}: {problems}") from None


class MockPlugin:
    """Fake devices of any kind; see the module docstring."""

    name: ClassVar[str] = "mock"
    #: typed as the contract declares it (a ClassVar in a Protocol is invariant)
    Settings: ClassVar[type[BaseModel]] = MockSettings

    def __init__(self, settings: MockSettings | None = None) -> None:
        self.settings = settings if settings is not None else MockSettings()
        if self.settings.devices is None:
            raise MockConfigError(
                "JOBGATE_MOCK_DEVICES is not set: name a TOML file of mock devices "
                "(see docs/accelerators.md)"
            )
        self.path = self.settings.devices
        self.config = MockFile.load(self.path)
        built = self._build()
        self._devices = [device for device, _ in built]
        self._stats = {d.id: (spec.utilization, spec.memory_used) for d, spec in built}

    def _build(self) -> list[tuple[Device, MockDeviceSpec]]:
        cuda = self.config.cuda
        counters = {"cuda": 0, "rocm": 0, "tpu": 0}
        built: list[tuple[Device, MockDeviceSpec]] = []
        for spec in self.config.devices:
            for _ in range(spec.count):
                n = counters[spec.kind]
                counters[spec.kind] += 1
                slot, capacity = {
                    "cuda": (cuda.slot, cuda.capacity),
                    "rocm": (ROCM_SLOT, Decimal(1)),
                    "tpu": (TPU_SLOT, Decimal(1)),
                }[spec.kind]
                attributes = {"mock": "true", "index": str(n)}
                if spec.health == "unhealthy":
                    attributes["health_reason"] = f"marked unhealthy in {self.path}"
                device = Device(
                    id=f"mock-{spec.kind}-{n}",
                    kind=spec.kind,
                    model=spec.model or _DEFAULT_MODEL[spec.kind],
                    memory=spec.memory,
                    processing_units=spec.processing_units,
                    numa_node=spec.numa_node,
                    slot=slot,
                    capacity=capacity,
                    health=spec.health,
                    attributes=attributes,
                )
                built.append((device, spec))
        return built

    @property
    def _enforcement(self) -> Enforcement | None:
        has_cuda = any(d.kind == "cuda" for d in self._devices)
        return (
            self.config.cuda.enforcement
            if has_cuda and self.config.cuda.mode == "fractional"
            else None
        )

    def fingerprint(self) -> Fingerprint:
        kinds = {d.kind for d in self._devices}
        slot_types: list[SlotType] = []
        if "cuda" in kinds:
            slot_types.append(self.config.cuda.slot_type(self._enforcement))
        if "rocm" in kinds:
            slot_types.append(SlotType(ROCM_SLOT))
        if "tpu" in kinds:
            slot_types.append(SlotType(TPU_SLOT))
        counts = ", ".join(
            f"{sum(d.kind == k for d in self._devices)} {k}"
            for k in ("cuda", "rocm", "tpu")
            if k in kinds
        )
        return Fingerprint(
            self.name,
            list(self._devices),
            slot_types,
            self._enforcement,
            detail=f"mock devices from {self.path}: {counts or 'none'}",
        )

    def reserve(self, allocation: Allocation) -> Reservation:
        fp = self.fingerprint()
        devices = {d.id: d for d in fp.devices}
        slot_type = next((s for s in fp.slot_types if s.name == allocation.slot), None)
        refuse_unenforced(self.config.cuda, allocation, fp.enforcement)
        check_allocation(allocation, devices, slot_type)
        order = sorted(allocation.amounts, key=lambda i: int(devices[i].attributes["index"]))
        kind = devices[order[0]].kind
        if kind == "cuda":
            return Reservation(env=self._cuda_env(allocation, devices, order, fp.enforcement))
        if kind == "rocm":
            return Reservation(
                env={
                    "ROCR_VISIBLE_DEVICES": ",".join(order),
                    "HIP_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(order))),
                }
            )
        host_chips = sum(d.kind == "tpu" for d in self._devices)
        return Reservation(
            env=tpu_env([int(devices[i].attributes["index"]) for i in order], host_chips)
        )

    def _cuda_env(
        self,
        allocation: Allocation,
        devices: dict[str, Device],
        order: list[str],
        enforcement: Enforcement | None,
    ) -> dict[str, str]:
        grants = grants_for(allocation, devices, self.config.cuda.shares_per_device, order)
        env = session_env(grants, allocation.slot, enforcement)
        if allocation.slot == SHARES_SLOT and enforcement == "mps":
            env.update(mps_env(grants))
        elif allocation.slot == SHARES_SLOT and enforcement == "preload":
            env.update(preload_env(grants))
        return env

    def stats(self) -> list[DeviceStats]:
        return [
            DeviceStats(d.id, self._stats[d.id][0], self._stats[d.id][1], d.memory)
            for d in self._devices
        ]
