"""The planner decides exactly as it did before it was made faster (golden data).

``data/planner_golden.json`` holds, per configuration and pass, a digest of every
decision (placements with nodes, devices and cpusets; waiting reasons and codes;
cancellations) that the planner made on the simulated cluster of
``benchmarks/scheduler.py`` (small, fixed seed). It was written by the planner as it was
before the speed-ups of issue 31 (commit 525be02); a change that alters any decision
fails here. Regenerate (only for an intended change of behaviour, saying so in the
commit) with ``python tests/unit/scheduling/test_sched_golden.py --write``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sched_builders import bench_scheduler

from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.planner import plan
from plugins.scheduling.types import KernelPlacement, Plan, Snapshot

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).with_name("data") / "planner_golden.json"

#: name -> (mix, nodes, sessions, SchedulerConfig as JSON)
SCENARIOS: dict[str, tuple[str, int, int, dict[str, Any]]] = {
    "default-mixed": ("mixed", 120, 1500, {}),
    "sample-all-mixed": ("mixed", 40, 400, {"sample_size": 0}),
    "dispersed-fraction": (
        "fraction",
        60,
        1500,
        {"scorers": [{"name": "dispersed", "weight": 1}, {"name": "numa", "weight": 0.5}]},
    ),
    "round-robin-drf-gpu": (
        "gpu",
        60,
        600,
        {"sequencer": "drf", "scorers": [{"name": "round-robin", "weight": 1}]},
    ),
    "fifo-cpu": ("cpu", 50, 3000, {"sequencer": "fifo"}),
}


def _kernel(k: KernelPlacement) -> str:
    devices = sorted((s, sorted((d, str(a)) for d, a in m.items())) for s, m in k.devices.items())
    return f"{k.node_id}|{sorted((s, str(v)) for s, v in k.slots.items())}|{devices}|{k.cpuset}"


def _digest(result: Plan) -> str:
    lines = [f"P {p.session_id} " + ";".join(map(_kernel, p.kernels)) for p in result.placements]
    lines += [f"W {sid} {result.codes[sid]} {why}" for sid, why in sorted(result.waiting.items())]
    lines += [f"C {sid} {why}" for sid, why in sorted(result.cancelled.items())]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def run(name: str, passes: int = 4) -> list[str]:
    """The digest of each pass's plan for scenario *name*."""
    sim = bench_scheduler()
    mix, nodes_n, sessions_n, config_json = SCENARIOS[name]
    args = argparse.Namespace(mix=mix, nodes=nodes_n, sessions=sessions_n, seed=7)
    now = datetime(2026, 11, 20, 14, 0, tzinfo=UTC)
    sim_nodes, pending = sim.build(args, now)
    nodes = {n.id: n for n in sim_nodes}
    config = SchedulerConfig.model_validate(config_json)
    running: list[Any] = []
    digests = []
    for number in range(1, passes + 1):
        snapshot = Snapshot(now, [n.state() for n in sim_nodes], pending, config=config)
        result = plan(snapshot)
        digests.append(_digest(result))
        assert sim.apply(result, nodes, running, random.Random(7 + number)) == 0
        assert sim.overcommitted(sim_nodes) == 0
        pending = sim.still_pending(pending, result)
        running = sim.finish(running, nodes)
        now += timedelta(seconds=2)
    return digests


def test_the_planner_decides_as_before() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert set(golden) == set(SCENARIOS)
    for name in SCENARIOS:
        assert run(name) == golden[name], f"scenario {name} decides differently"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if "--write" in sys.argv:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps({n: run(n) for n in SCENARIOS}, indent=2) + "\n")
    print(GOLDEN.read_text())
