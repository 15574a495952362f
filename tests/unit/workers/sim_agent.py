"""A NodeAgent on the sim runtime whose events a test reads (no Redis, no gateway)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contract.messages import KernelEvent
from plugins.resources import ResourceSlots
from plugins.runtimes.base import RuntimeContext
from plugins.runtimes.sim import SimRuntime, SimSettings
from workers.config import WorkerSettings
from workers.kernel import NodeServices
from workers.node import NodeAgent
from workers.state import StateStore


class Recorder:
    def __init__(self) -> None:
        self.events: list[KernelEvent] = []

    def report(self, event: KernelEvent) -> None:
        self.events.append(event)


def sim_agent(tmp_path: Path) -> tuple[NodeAgent, Recorder]:
    recorder = Recorder()
    runtime = SimRuntime(SimSettings(), RuntimeContext("n1", tmp_path))
    store = StateStore(tmp_path / "kernels")
    services: Any = NodeServices("n1", runtime, recorder, None, store)
    settings = WorkerSettings(node_id="n1", data_dir=tmp_path)
    return NodeAgent("n1", "node:n1", runtime, services, settings, ResourceSlots()), recorder
