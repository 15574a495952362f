"""How fast a high-priority session runs when it must preempt a lower-priority one.

The preemption issue's figure: a group with ``{"preemption": "priority",
"preemption_grace_s": GRACE}``, one node whose cpus a single low-priority batch session
fills. Each round::

    submit the victim (priority 10, all the node's cpus) ─▶ wait: RUNNING
    t0 = POST /v1/sessions (priority 90, the same size)
         ─▶ scheduler: no node fits, preempting the victim ─▶ victim PREEMPTED   (decide)
         ─▶ worker: notice file, SIGTERM, (grace, SIGKILL) ─▶ exit event
         ─▶ gateway: victim PENDING again (its next attempt), asks for a pass     (stop)
         ─▶ scheduler places the preemptor ─▶ SCHEDULED                          (schedule)
         ─▶ worker starts it ─▶ running event                                     (start)
    t1 = the preemptor is RUNNING (polled every 5 ms)          latency = t1 - t0

The split comes from the two sessions' status history (``at``, the gateway's clock,
the same machine's as t0). The victim is a Python loop that exits at once on SIGTERM
(``--victim exits``), or one that ignores it (``--victim ignores``) so the grace and
the SIGKILL are measured too. Goal: latency ≤ grace + 1 s on the process runtime
(with a victim that exits on SIGTERM).

It starts ``jobgate up`` (process runtime, the local worker offering ``--cpu`` cores)
in a temporary directory on free ports and talks to its API directly. Progress goes
to stderr; the last line of stdout is one JSON object.

    .venv/bin/python benchmarks/preemption.py --rounds 5 [--grace 2] [--victim ignores]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
from common import jobgate_up, log, percentile, wait_for

T = TypeVar("T")
TERMINAL = {"SUCCEEDED", "FAILED", "TERMINATED", "CANCELLED", "ERROR"}
LOW, HIGH = 10, 90

#: exits at once on SIGTERM, as a job that checkpoints quickly would
EXITS = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("started", flush=True)
end = time.monotonic() + 600  # bounded: it ends by itself if nobody stops it
while time.monotonic() < end:
    time.sleep(0.05)
"""
#: ignores SIGTERM: only the SIGKILL after the grace ends it
IGNORES = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("started", flush=True)
end = time.monotonic() + 600  # bounded: it ends by itself if nobody stops it
while time.monotonic() < end:
    time.sleep(0.05)
"""


def get(api: httpx.Client, session_id: str) -> dict[str, Any]:
    r = api.get(f"/v1/sessions/{session_id}")
    r.raise_for_status()
    session: dict[str, Any] = r.json()
    return session


def submit(api: httpx.Client, script: str, cpu: str, priority: int) -> str:
    body = {
        "command": ["python3", "-c", script],
        "resources": {"cpu": cpu, "mem": "64m"},
        "priority": priority,
    }
    r = api.post("/v1/sessions", json=body)
    r.raise_for_status()
    session_id: str = r.json()["id"]
    return session_id


def first_at(session: dict[str, Any], to: str, after: float) -> float:
    """The epoch time of the session's first move into *to* at or after *after*."""
    for h in session["history"]:
        when = datetime.fromisoformat(h["at"])
        at = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
        if h["to_status"] == to and at >= after:
            return at
    raise RuntimeError(f"no move to {to} in {session['id']}'s history: {session['history']}")


def one_round(api: httpx.Client, script: str, cpu: str) -> dict[str, float]:
    victim = submit(api, script, cpu, LOW)
    wait_for(
        lambda: True if get(api, victim)["status"] == "RUNNING" else None,
        "the victim to run",
        timeout=60,
        every=0.02,
    )

    def handler_set() -> bool | None:  # its Python printed "started": the handler is in
        r = api.get(f"/v1/sessions/{victim}/logs")
        return True if r.status_code == 200 and "started" in r.text else None

    wait_for(handler_set, "the victim's first line", timeout=30, every=0.02)
    wall0, t0 = time.time(), time.perf_counter()
    high = submit(api, EXITS, cpu, HIGH)
    posted = time.perf_counter() - t0

    def running() -> float | None:
        s = get(api, high)["status"]
        if s == "RUNNING":
            return time.perf_counter() - t0
        if s in TERMINAL:
            raise RuntimeError(f"the preemptor ended {s}")
        return None

    latency = wait_for(running, "the preemptor to run", timeout=120, every=0.005)
    v, h = get(api, victim), get(api, high)
    preempted = first_at(v, "PREEMPTED", wall0)
    requeued = first_at(v, "PENDING", preempted)
    scheduled = first_at(h, "SCHEDULED", wall0)
    started = first_at(h, "RUNNING", wall0)
    for i in (victim, high):
        api.delete(f"/v1/sessions/{i}", params={"force": True})
    wait_for(
        lambda: all(get(api, i)["status"] in TERMINAL for i in (victim, high)) or None,
        "the round's sessions to end",
        timeout=60,
        every=0.05,
    )
    return {
        "latency": latency,
        "post": posted,
        "decide": preempted - wall0,
        "stop": requeued - preempted,
        "schedule": scheduled - requeued,
        "start": started - scheduled,
        "observed": latency - (started - wall0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--grace", type=float, default=2.0, help="preemption_grace_s")
    parser.add_argument("--cpu", default="2", help="cores the local worker offers")
    parser.add_argument("--victim", choices=("exits", "ignores"), default="exits")
    args = parser.parse_args()
    script = EXITS if args.victim == "exits" else IGNORES
    with tempfile.TemporaryDirectory(prefix="preempt-bench-") as tmp:
        root = Path(tmp)
        env = {"JOBGATE_CONFIG": str(root / "config.toml"), "JOBGATE_WORKER_CPU": args.cpu}
        proc, port, key = jobgate_up(root, env)
        api = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        try:
            scheduler = {"preemption": "priority", "preemption_grace_s": args.grace}
            r = api.put("/v1/resource-groups/default", json={"scheduler": scheduler})
            r.raise_for_status()
            rounds = []
            for n in range(args.rounds):
                seen = one_round(api, script, args.cpu)
                rounds.append(seen)
                log(
                    f"round {n + 1}: RUNNING after {seen['latency']:.3f}s "
                    f"(decide {seen['decide']:.3f}, stop {seen['stop']:.3f}, "
                    f"schedule {seen['schedule']:.3f}, start {seen['start']:.3f}, "
                    f"seen by the poll +{seen['observed']:.3f})"
                )
        finally:
            api.close()
            proc.terminate()
            proc.wait(60)
    latency = [r["latency"] for r in rounds]
    goal = args.grace + 1.0
    parts = ("post", "decide", "stop", "schedule", "start", "observed")
    print(
        json.dumps(
            {
                "benchmark": "preemption",
                "rounds": len(rounds),
                "victim": args.victim,
                "grace_s": args.grace,
                "cpu": args.cpu,
                "submit_to_running_p50_s": round(statistics.median(latency), 3),
                "submit_to_running_p90_s": round(percentile(latency, 0.9), 3),
                "submit_to_running_max_s": round(max(latency), 3),
                "goal_s": goal,
                "met": max(latency) <= goal,
                "split_median_s": {
                    p: round(statistics.median(r[p] for r in rounds), 3) for p in parts
                },
                "split_max_s": {p: round(max(r[p] for r in rounds), 3) for p in parts},
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
