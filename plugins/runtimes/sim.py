"""The ``sim`` runtime: no process at all, for scale tests (as Kubernetes' KWOK fakes nodes).

A simulated kernel "runs" for a duration and exits with a code, both taken from the
session's environment, so one benchmark can mix short and long jobs:

* ``JOBGATE_SIM_DURATION`` - seconds (default from settings; ``inf`` runs until stopped;
  a session without a command and without it runs until stopped);
* ``JOBGATE_SIM_EXIT_CODE`` - the exit code (default 0);
* ``JOBGATE_SIM_OUTPUT`` - text written to stdout when it starts;
* ``JOBGATE_SIM_START_ERROR`` - fail to start with this reason (tests the ERROR path).

Simulated kernels live in the worker's memory: a restarted sim worker has none.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic_settings import BaseSettings, SettingsConfigDict

from plugins.common import EGRESS_MODES
from plugins.runtimes.base import (
    CommitUnsupported,
    ExitStatus,
    KernelHandle,
    KernelSpec,
    LogChunk,
    ProgressCallback,
    RuntimeContext,
    RuntimeFailure,
    RuntimeInfo,
)

__all__ = ["SimRuntime"]


class SimSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBGATE_SIM_", extra="ignore")

    default_duration_s: float = 0.0
    #: what the simulated nodes claim about cpu/mem limit enforcement
    limits_enforced: bool = True


@dataclass
class _SimKernel:
    spec: KernelSpec
    started: float
    duration: float
    exit_code: int
    output: bytes
    stopped: asyncio.Event = field(default_factory=asyncio.Event)


class SimRuntime:
    name: ClassVar[str] = "sim"
    Settings: ClassVar[type[SimSettings]] = SimSettings

    def __init__(self, settings: SimSettings, context: RuntimeContext) -> None:
        self.settings = settings
        self.context = context
        self._kernels: dict[str, _SimKernel] = {}

    async def info(self) -> RuntimeInfo:
        return RuntimeInfo(
            name=self.name,
            available=True,
            version="sim",
            limits_enforced=self.settings.limits_enforced,
            cgroup="sim",
            detail="simulated kernels (no processes)",
            egress=EGRESS_MODES,  # simulated: nothing connects anyway
        )

    async def prepare(self, spec: KernelSpec, progress: ProgressCallback) -> None:
        error = spec.env.get("JOBGATE_SIM_START_ERROR")
        if error:
            raise RuntimeFailure(error)

    def _duration(self, spec: KernelSpec) -> float:
        raw = spec.env.get("JOBGATE_SIM_DURATION")
        if raw is None:
            return self.settings.default_duration_s if spec.command else math.inf
        try:
            return float(raw)
        except ValueError:
            raise RuntimeFailure(f"JOBGATE_SIM_DURATION is not a number: {raw!r}") from None

    async def image_labels(self, image: str) -> dict[str, str]:
        return {}

    async def start(self, spec: KernelSpec) -> KernelHandle:
        kernel = _SimKernel(
            spec=spec,
            started=time.time(),
            duration=self._duration(spec),
            exit_code=int(spec.env.get("JOBGATE_SIM_EXIT_CODE", "0")),
            output=spec.env.get("JOBGATE_SIM_OUTPUT", "").encode(),
        )
        self._kernels[spec.kernel_id] = kernel
        return KernelHandle(
            spec.kernel_id, spec.session_id, ref=f"sim-{spec.kernel_id}", started_at=kernel.started
        )

    async def list_kernels(self) -> list[KernelHandle]:
        return [
            KernelHandle(
                k.spec.kernel_id,
                k.spec.session_id,
                ref=f"sim-{k.spec.kernel_id}",
                started_at=k.started,
            )
            for k in self._kernels.values()
            if k.spec.node_id == self.context.node_id
        ]

    async def wait(self, handle: KernelHandle) -> ExitStatus:
        kernel = self._kernels[handle.kernel_id]
        remaining = kernel.started + kernel.duration - time.time()
        if remaining > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    kernel.stopped.wait(), None if math.isinf(remaining) else remaining
                )
        if kernel.stopped.is_set():
            return ExitStatus(exit_code=143, reason="killed by signal 15 (SIGTERM)")
        return ExitStatus(exit_code=kernel.exit_code)

    async def logs(self, handle: KernelHandle, offsets: dict[str, int]) -> AsyncIterator[LogChunk]:
        kernel = self._kernels.get(handle.kernel_id)
        if kernel is not None and kernel.output and offsets.get("stdout", 0) == 0:
            yield LogChunk("stdout", 0, kernel.output)

    async def write_notice(self, handle: KernelHandle, name: str, text: str) -> None:
        return None  # simulated kernels have no files

    async def stop(self, handle: KernelHandle, grace: float) -> None:
        kernel = self._kernels.get(handle.kernel_id)
        if kernel is not None:
            kernel.stopped.set()

    async def commit(self, handle: KernelHandle, image: str) -> str:
        raise CommitUnsupported(
            "the sim runtime only simulates kernels: there is no container image to commit"
        )

    async def remove(self, handle: KernelHandle) -> None:
        self._kernels.pop(handle.kernel_id, None)

    async def close(self) -> None:
        self._kernels.clear()
