"""Which nodes one worker process attaches: the host's plan, made before it joins.

* a plain host: one node (``node_id``), this machine's cores and memory, the accelerator
  plugins found here, its own queue, its own Redis user and a keeper;
* a sim host (``sim_nodes`` > 0): that many simulated nodes ``<node_id>-0000`` ... with
  this machine's capacity, on the ``sim`` runtime;
* a Slurm host (``--runtime slurm``): one node per available Slurm node of the attached
  partitions (``JOBGATE_SLURM_PARTITIONS``), named as Slurm names it, with the cores,
  memory, GPUs (gres), features and address Slurm gives it; its resource group is the
  partition's name unless ``JOBGATE_RESOURCE_GROUP`` is set.

A host of many nodes (sim, Slurm) serves one queue for all of them, logs in to Redis with
the configured login and has no keeper: it is the worker process, not a machine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from contract.keys import many_host_queue, node_queue, sim_host_queue
from plugins.accelerators.node import NodeAccelerators
from plugins.resources import ResourceSlots
from plugins.runtimes.slurm.cli import SlurmCli
from plugins.runtimes.slurm.nodes import SlurmGpus, attached_nodes, node_capacity, node_labels
from plugins.runtimes.slurm.runtime import SlurmSettings
from workers.config import WorkerSettings
from workers.devices import load_accelerators
from workers.fingerprint import host_capacity

__all__ = ["HostPlan", "NodePlan", "plan_host"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NodePlan:
    node_id: str
    capacity: ResourceSlots
    accelerators: NodeAccelerators | None
    #: this node's settings: the host's, with its own resource group, labels, address
    settings: WorkerSettings
    #: where its kernel states live (None: in memory, a sim host's)
    store_dir: Path | None
    #: what it registers as hostname and arch (None: this machine's)
    hostname: str | None = None
    arch: str | None = None


@dataclass(frozen=True, slots=True)
class HostPlan:
    runtime: str
    queue: str
    nodes: list[NodePlan] = field(default_factory=list)
    #: many nodes in one process: one queue, the configured Redis login, no keeper
    many: bool = False
    #: kernels get working directories (simulated ones do not)
    workdirs: bool = True


async def plan_host(s: WorkerSettings) -> HostPlan:
    if s.sim_nodes > 0:
        capacity = host_capacity(s.worker_cpu, s.worker_mem)
        accelerators = load_accelerators(s.accelerators)
        nodes = [
            NodePlan(f"{s.node_id}-{i:04d}", capacity, accelerators, s, None)
            for i in range(s.sim_nodes)
        ]
        return HostPlan("sim", sim_host_queue(s.node_id), nodes, many=True, workdirs=False)
    if s.worker_runtime == "slurm":
        return await _slurm_host(s)
    node = NodePlan(
        s.node_id,
        host_capacity(s.worker_cpu, s.worker_mem),
        load_accelerators(s.accelerators),
        s,
        s.state_dir / "kernels",
    )
    return HostPlan(s.worker_runtime, node_queue(s.node_id), [node])


async def _slurm_host(s: WorkerSettings) -> HostPlan:
    slurm = SlurmSettings()
    cli = SlurmCli(timeout_s=slurm.command_timeout_s, retries=slurm.retries)
    found = attached_nodes(await cli.show_nodes(), slurm.partitions)
    if not found:
        where = ", ".join(slurm.partitions) or "any partition"
        raise RuntimeError(f"no available Slurm node in {where} to attach")
    nodes = []
    for node in found:
        group = s.resource_group
        if "resource_group" not in s.model_fields_set:
            group = next((p for p in slurm.partitions if p in node.partitions), None) or (
                node.partitions[0] if node.partitions else s.resource_group
            )
        labels = node_labels(node) | s.labels
        settings = s.model_copy(
            update={
                "resource_group": group,
                "node_labels": [f"{k}={v}" for k, v in labels.items()],
                "node_address": node.address,
                # Slurm does not give a node's NUMA layout: report none, not this host's
                "numa_sysfs_root": s.state_dir / "nodes" / node.name / "no-sysfs",
            }
        )
        nodes.append(
            NodePlan(
                node.name,
                node_capacity(node),
                NodeAccelerators([SlurmGpus(node)]),
                settings,
                s.state_dir / "nodes" / node.name / "kernels",
                hostname=node.hostname,
                arch=node.arch or None,
            )
        )
    log.info("attaching Slurm nodes %s", ", ".join(n.node_id for n in nodes))
    return HostPlan("slurm", many_host_queue(s.node_id), nodes, many=True)
