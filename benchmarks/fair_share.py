"""Simulate weeks of contention on the real fair-share sequencer (no sleeps: a clock).

    .venv/bin/python benchmarks/fair_share.py

A cluster of ``--nodes`` nodes of 16 cpu; every job asks 1 cpu (and 1 GiB) for
``--job-minutes``. Every tick (``--tick-minutes``) the jobs that are done end, each
project submits its jobs (``ml-a`` 4x as many as ``ml-b``: 16 and 4 per 5-minute tick,
so 192 and 48 cpus of demand on a 64-cpu cluster, both more than half of it; each queue
capped at ``--max-pending`` as a ``max_pending`` policy would cap it), and one pass of
the real planner (``plan()``, sequencer ``fair-share``, default options: 7-day
half-life) decides what starts. Decayed usage is kept as the gateway computes it
(:func:`plugins.scheduling.fairshare.decayed`, each tick adding the running jobs'
decayed slot-seconds to the decayed sums).

Week 1: ``ml-a`` and ``ml-b``, shares 50/50. Goal: each project's decayed usage ends
within 5 % (relative) of its share. Then ``ml-c`` joins (share 1, submitting as ``ml-b``
does) and the simulation goes on for ``--after-days``; reported: the hours until every
project's share of the cluster over the last hour is within 5 % of 1/3 ("allocation
converged") and until every decayed usage is ("usage converged"; with a 7-day half-life
the history of the first two takes days to fade). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from plugins.resources import ResourceSlots
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.fairshare import FairShareSettings, FairShareView, billing_rate, decayed
from plugins.scheduling.planner import plan
from plugins.scheduling.types import NodeState, SessionRequest, Snapshot

START = datetime(2026, 11, 2, tzinfo=UTC)
JOB = ResourceSlots.parse({"cpu": 1, "mem": "1g"})
NODE_CAP = ResourceSlots.parse({"cpu": 16, "mem": "64g"})


@dataclass
class Running:
    project: str
    user: str
    node: str
    started: datetime
    ends: datetime


class Sim:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        options = {"half_life_s": args.half_life_days * 86_400}
        self.settings = FairShareSettings.model_validate(options)
        self.config = SchedulerConfig.model_validate(
            {"sequencer": {"name": "fair-share", "options": options}}
        )
        self.now = START
        self.tick = timedelta(minutes=args.tick_minutes)
        self.duration = timedelta(minutes=args.job_minutes)
        self.rate = billing_rate(JOB, self.settings)
        self.projects: dict[str, int] = {}  # project -> jobs submitted per tick
        self.pending: dict[str, deque[SessionRequest]] = {}
        self.running: list[Running] = []
        self.decayed: dict[str, float] = {}
        self.users: dict[tuple[str, str], float] = {}
        self.hour: deque[dict[str, int]] = deque(maxlen=max(1, 60 // args.tick_minutes))
        self.week: dict[str, float] = {}  # slot-seconds held over the whole run, per project
        self.seq = 0
        self.passes = 0
        self.plan_s = 0.0

    def join(self, project: str, per_tick: int) -> None:
        self.projects[project] = per_tick
        self.pending[project] = deque()

    def step(self) -> None:
        """One tick: decay and charge, end what is done, submit, one planner pass."""
        following = self.now + self.tick
        fade = 2.0 ** (-self.tick.total_seconds() / self.settings.half_life_s)
        self.decayed = {p: v * fade for p, v in self.decayed.items()}
        self.users = {k: v * fade for k, v in self.users.items()}
        for job in self.running:  # what each running job adds over [now, following)
            added = decayed(
                self.rate, self.now, min(job.ends, following), following, self.settings.half_life_s
            )
            self.decayed[job.project] = self.decayed.get(job.project, 0.0) + added
            key = (job.project, job.user)
            self.users[key] = self.users.get(key, 0.0) + added
        self.now = following
        self.running = [j for j in self.running if j.ends > self.now]
        for project, per_tick in self.projects.items():
            queue = self.pending[project]
            for k in range(per_tick):
                if len(queue) < self.args.max_pending:
                    self.seq += 1
                    queue.append(
                        SessionRequest(
                            id=f"s{self.seq:08d}",
                            owner=f"{project}-u{k % 2}",
                            requested=JOB,
                            created_at=self.now,
                            project=project,
                        )
                    )
        self._pass()
        held = {p: 0 for p in self.projects}
        for job in self.running:
            held[job.project] += 1
        self.hour.append(held)
        for p, n in held.items():
            self.week[p] = self.week.get(p, 0.0) + n * self.tick.total_seconds()

    def _pass(self) -> None:
        used: dict[str, int] = {}
        for job in self.running:
            used[job.node] = used.get(job.node, 0) + 1
        nodes = [
            NodeState(id=f"n{k:03d}", capacity=NODE_CAP, used=JOB * used.get(f"n{k:03d}", 0))
            for k in range(self.args.nodes)
        ]
        pending = [s for q in self.pending.values() for s in q]
        view = FairShareView(projects=dict(self.decayed), users=dict(self.users))
        snapshot = Snapshot(
            now=self.now, nodes=nodes, pending=pending, config=self.config, fair_share=view
        )
        t0 = time.perf_counter()
        decided = plan(snapshot)
        self.plan_s += time.perf_counter() - t0
        self.passes += 1
        placed = {p.session_id: p.kernels[0].node_id for p in decided.placements}
        for project, queue in self.pending.items():
            kept: deque[SessionRequest] = deque()
            for s in queue:
                node = placed.get(s.id)
                if node is None:
                    kept.append(s)
                else:
                    self.running.append(
                        Running(project, s.owner, node, self.now, self.now + self.duration)
                    )
            self.pending[project] = kept

    def usage_fractions(self) -> dict[str, float]:
        total = sum(self.decayed.get(p, 0.0) for p in self.projects)
        return {p: self.decayed.get(p, 0.0) / total for p in self.projects}

    def hour_fractions(self) -> dict[str, float]:
        sums = {p: sum(h.get(p, 0) for h in self.hour) for p in self.projects}
        total = sum(sums.values()) or 1
        return {p: n / total for p, n in sums.items()}


def within(fractions: dict[str, float], tolerance: float) -> bool:
    """Every fraction within *tolerance* (relative) of an equal share."""
    share = 1 / len(fractions)
    return all(abs(f - share) <= tolerance * share for f in fractions.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--job-minutes", type=int, default=60)
    parser.add_argument("--tick-minutes", type=int, default=5)
    parser.add_argument("--max-pending", type=int, default=200)
    parser.add_argument("--heavy", type=int, default=16, help="ml-a's jobs per tick")
    parser.add_argument("--light", type=int, default=4, help="ml-b's (and ml-c's) jobs per tick")
    parser.add_argument("--after-days", type=float, default=7.0)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--half-life-days", type=float, default=7.0)
    args = parser.parse_args()
    started = time.perf_counter()
    sim = Sim(args)
    sim.join("ml-a", args.heavy)
    sim.join("ml-b", args.light)
    week = timedelta(days=7)
    while sim.now < START + week:
        sim.step()
    week1_usage = sim.usage_fractions()
    week1_slots = {p: v / sum(sim.week.values()) for p, v in sim.week.items()}
    week1_hour = sim.hour_fractions()
    print(
        f"week 1: decayed usage {_pct(week1_usage)}; slot-time {_pct(week1_slots)}", file=sys.stderr
    )
    sim.join("ml-c", args.light)
    joined = sim.now
    alloc_h = usage_h = None
    while sim.now < joined + timedelta(days=args.after_days):
        sim.step()
        hours = (sim.now - joined).total_seconds() / 3600
        if alloc_h is None and hours >= 1 and within(sim.hour_fractions(), args.tolerance):
            alloc_h = hours
        if usage_h is None and within(sim.usage_fractions(), args.tolerance):
            usage_h = hours
    print(
        f"ml-c joined: allocation within {args.tolerance:.0%} after {alloc_h} h, "
        f"decayed usage after {usage_h} h; at the end {_pct(sim.usage_fractions())}",
        file=sys.stderr,
    )
    ok = within(week1_usage, args.tolerance)
    print(
        json.dumps(
            {
                "benchmark": "fair_share",
                "week1_usage_share": {p: round(v, 4) for p, v in week1_usage.items()},
                "week1_slot_time_share": {p: round(v, 4) for p, v in week1_slots.items()},
                "week1_last_hour_share": {p: round(v, 4) for p, v in week1_hour.items()},
                "week1_within_tolerance": ok,
                "third_project_allocation_converged_h": alloc_h,
                "third_project_usage_converged_h": usage_h,
                "final_usage_share": {p: round(v, 4) for p, v in sim.usage_fractions().items()},
                "tolerance": args.tolerance,
                "half_life_days": args.half_life_days,
                "cluster_cpus": args.nodes * 16,
                "passes": sim.passes,
                "plan_time_s": round(sim.plan_s, 3),
                "wall_s": round(time.perf_counter() - started, 3),
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


def _pct(fractions: dict[str, float]) -> str:
    return ", ".join(f"{p} {v:.1%}" for p, v in fractions.items())


if __name__ == "__main__":
    main()
