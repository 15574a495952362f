"""Benchmark the pure planner on a synthetic cluster, pass after pass.

    .venv/bin/python benchmarks/scheduler.py --nodes 5000 --sessions 50000 --mix mixed

Each pass builds a Snapshot from the simulated cluster, times ``plan(snapshot)`` alone,
then plays the applier: adds every placement to its nodes and devices, checks that no
node slot, device or cpu is over-committed (``overcommitted`` counts violations and
must be 0), and lets some running sessions finish so the next pass has room again. It
stops when nothing is pending, when a pass can change nothing, or after --max-passes.

Mixes: ``cpu`` (cpu/mem only), ``gpu`` (whole cuda.device on 8-GPU NUMA nodes),
``fraction`` (cuda.shares on 1.0-share GPUs, quantum 0.1), ``mixed`` (all three, plus
a few gang sessions). The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from plugins.resources import ResourceSlots
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.planner import plan
from plugins.scheduling.reasons import DID_NOT_FIT
from plugins.scheduling.types import (
    DeviceState,
    KernelPlacement,
    NodeState,
    Plan,
    SessionRequest,
    Snapshot,
)

GiB = 1024**3
D = Decimal
Running = tuple[int, list[KernelPlacement]]  # (passes left to run, its containers)


@dataclass
class SimDevice:
    id: str
    slot: str
    capacity: Decimal
    numa: int
    quantum: Decimal | None
    used: Decimal = Decimal(0)
    healthy: bool = True


@dataclass
class SimNode:
    id: str
    capacity: dict[str, Decimal]
    devices: list[SimDevice] = field(default_factory=list)
    numa_cpus: dict[int, list[int]] = field(default_factory=dict)
    used: dict[str, Decimal] = field(default_factory=dict)
    used_cpus: set[int] = field(default_factory=set)
    enforcement: str | None = None

    def state(self) -> NodeState:
        return NodeState(
            id=self.id,
            capacity=ResourceSlots(self.capacity),
            used=ResourceSlots(dict(self.used)),
            devices=[
                DeviceState(
                    d.id, d.slot, d.capacity, d.used, d.numa, healthy=d.healthy, quantum=d.quantum
                )
                for d in self.devices
            ],
            numa_cpus=self.numa_cpus,
            used_cpus=set(self.used_cpus),
            fraction_enforcement=self.enforcement,
            labels={"zone": f"z{int(self.id[1:]) % 4}"},
        )


def make_node(k: int, kind: str, rng: random.Random) -> SimNode:
    cpus = rng.choice([32, 64, 64, 128])
    capacity = {"cpu": D(cpus), "mem": D(cpus * 4 * GiB)}
    node = SimNode(f"n{k:05d}", capacity)
    node.numa_cpus = {0: list(range(cpus // 2)), 1: list(range(cpus // 2, cpus))}
    if kind == "gpu":
        node.devices = [
            SimDevice(f"n{k:05d}-g{j}", "cuda.device", D(1), j // 4, None) for j in range(8)
        ]
        capacity["cuda.device"] = D(8)
    elif kind == "fraction":
        gpus = rng.choice([4, 8])
        node.devices = [
            SimDevice(f"n{k:05d}-f{j}", "cuda.shares", D(1), j * 2 // gpus, D("0.1"))
            for j in range(gpus)
        ]
        capacity["cuda.shares"] = D(gpus)
        node.enforcement = "mps"
    if node.devices and rng.random() < 0.02:
        node.devices[0].healthy = False
    return node


def make_request(i: int, kind: str, rng: random.Random, now: datetime) -> SessionRequest:
    slots: dict[str, Decimal] = {}
    if kind == "cpu":
        slots = {
            "cpu": D(rng.choice(["0.5", "1", "2", "4", "8"])),
            "mem": D(rng.choice([1, 2, 4, 8, 16]) * GiB),
        }
    elif kind == "gpu":
        slots = {
            "cpu": D(rng.choice([4, 8])),
            "mem": D(rng.choice([16, 32]) * GiB),
            "cuda.device": D(rng.choice([1, 1, 1, 2, 2, 4, 8])),
        }
    else:
        slots = {
            "cpu": D(rng.choice([1, 2])),
            "mem": D(rng.choice([4, 8]) * GiB),
            "cuda.shares": D(rng.choice(["0.1", "0.2", "0.3", "0.5", "0.5", "1", "1.5"])),
        }
    owner = f"u{rng.randrange(200)}"
    return SessionRequest(
        id=f"s{i:06d}",
        owner=owner,
        project=f"p{int(owner[1:]) % 20}",
        requested=ResourceSlots(slots),
        created_at=now - timedelta(seconds=i),
        priority=rng.choice([50] * 8 + [80, 20]),
        cluster_size=2 if kind == "cpu" and rng.random() < 0.02 else 1,
    )


def overcommitted(nodes: list[SimNode]) -> int:
    bad = 0
    for node in nodes:
        bad += sum(1 for slot, used in node.used.items() if used > node.capacity.get(slot, 0))
        bad += sum(1 for d in node.devices if d.used > d.capacity or (d.used and not d.healthy))
        all_cpus = {c for cpus in node.numa_cpus.values() for c in cpus}
        bad += len(node.used_cpus - all_cpus)
    return bad


def apply(
    result: Plan, nodes: dict[str, SimNode], running: list[Running], rng: random.Random
) -> int:
    """Commit a plan the way the applier would; return cpus pinned twice (must be 0)."""
    clashes = 0
    for placement in result.placements:
        held = []
        for kernel in placement.kernels:
            node = nodes[kernel.node_id]
            for slot, amount in kernel.slots.items():
                node.used[slot] = node.used.get(slot, D(0)) + amount
            by_id = {d.id: d for d in node.devices}
            for amounts in kernel.devices.values():
                for device_id, amount in amounts.items():
                    by_id[device_id].used += amount
            cpus = set(kernel.cpuset or ())
            clashes += len(cpus & node.used_cpus)
            node.used_cpus |= cpus
            held.append(kernel)
        running.append((rng.randint(1, 3), held))
    return clashes


def finish(running: list[Running], nodes: dict[str, SimNode]) -> list[Running]:
    still = []
    for left, kernels in running:
        if left > 1:
            still.append((left - 1, kernels))
            continue
        for kernel in kernels:
            node = nodes[kernel.node_id]
            for slot, amount in kernel.slots.items():
                node.used[slot] -= amount
            by_id = {d.id: d for d in node.devices}
            for amounts in kernel.devices.values():
                for device_id, amount in amounts.items():
                    by_id[device_id].used -= amount
            node.used_cpus -= set(kernel.cpuset or ())
    return still


def still_pending(pending: list[SessionRequest], result: Plan) -> list[SessionRequest]:
    """The sessions left waiting after *result*, as the gateway keeps them: each counts
    the passes in a row it did not fit."""
    return [
        replace(s, attempts=s.attempts + 1) if result.codes[s.id] in DID_NOT_FIT else s
        for s in pending
        if s.id in result.waiting
    ]


def build(args: argparse.Namespace, now: datetime) -> tuple[list[SimNode], list[SessionRequest]]:
    rng = random.Random(args.seed)
    kinds = {
        "cpu": ["cpu"],
        "gpu": ["gpu"],
        "fraction": ["fraction"],
        "mixed": ["cpu", "cpu", "gpu", "fraction"],
    }[args.mix]
    nodes = [make_node(k, kinds[k % len(kinds)], rng) for k in range(args.nodes)]
    requests = [make_request(i, rng.choice(kinds), rng, now) for i in range(args.sessions)]
    return nodes, requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--sessions", type=int, default=50000)
    parser.add_argument("--mix", choices=["cpu", "gpu", "fraction", "mixed"], default="mixed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--config", default="{}", help="SchedulerConfig as JSON")
    parser.add_argument("--max-passes", type=int, default=100)
    parser.add_argument("--profile", metavar="FILE", help="write cProfile stats of plan()")
    args = parser.parse_args()

    now = datetime(2026, 11, 20, 14, 0, tzinfo=UTC)
    sim_nodes, pending = build(args, now)
    nodes = {n.id: n for n in sim_nodes}
    config = SchedulerConfig.model_validate_json(args.config)
    running: list[Running] = []
    times: list[float] = []
    cpu_times: list[float] = []
    placed = bad = clashes = 0
    profiler = cProfile.Profile() if args.profile else None
    for number in range(1, args.max_passes + 1):
        snapshot = Snapshot(now, [n.state() for n in sim_nodes], pending, config=config)
        if profiler:
            profiler.enable()
        start, cpu = time.perf_counter(), time.process_time()
        result = plan(snapshot)
        elapsed = time.perf_counter() - start
        cpu_times.append(time.process_time() - cpu)
        if profiler:
            profiler.disable()
        times.append(elapsed)
        placed += len(result.placements)
        clashes += apply(result, nodes, running, random.Random(args.seed + number))
        bad += overcommitted(sim_nodes)
        empty = sum(1 for text in result.waiting.values() if not text)
        print(
            f"pass {number}: {len(result.placements)} placed, {len(result.waiting)} waiting, "
            f"{len(result.cancelled)} cancelled in {elapsed:.3f}s"
            + (f" ({empty} without reason!)" if empty else ""),
            file=sys.stderr,
        )
        pending = still_pending(pending, result)
        if not pending or (not result.placements and not running):
            break
        running = finish(running, nodes)
        now += timedelta(seconds=2)
    if profiler and args.profile:
        profiler.dump_stats(args.profile)
        pstats.Stats(args.profile, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    total, cpu_total = sum(times), sum(cpu_times)
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "sessions": args.sessions,
                "mix": args.mix,
                "seed": args.seed,
                "passes": len(times),
                "placements": placed,
                "placements_per_s": round(placed / total, 1) if total else 0.0,
                "placements_per_cpu_s": round(placed / cpu_total, 1) if cpu_total else 0.0,
                "overcommitted": bad + clashes,
                "pending_left": len(pending),
                "p50_pass_s": round(statistics.median(times), 4),
                "max_pass_s": round(max(times), 4),
                "plan_time_s": round(total, 3),
                "plan_cpu_s": round(cpu_total, 3),
                "sample_size": config.sample_size,
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
