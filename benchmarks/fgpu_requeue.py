"""How fast a waiting fractional-GPU session runs once a running one is terminated.

The accelerator issue's scenario 2: a node that can give 2 fGPU (one 8 GiB mock GPU
with 2 shares), three sessions of 1 fGPU each: two run, one waits. Terminating one of
the running ones must let the waiting one run within 2 s. Each round::

    submit 3 x cuda.shares=1 ─▶ wait: 2 RUNNING, 1 PENDING with the scheduler's reason
    t0 = DELETE /v1/sessions/<a running one>
         ─▶ worker stops it ─▶ exit event ─▶ gateway frees its share, asks for a pass
         ─▶ scheduler places the waiting one ─▶ worker starts it ─▶ running event
    t1 = the waiting one is RUNNING (polled every 5 ms)          latency = t1 - t0

It starts ``jobgate up`` (process runtime, mock devices) in a temporary directory on
free ports, as a user would, and talks to its API directly (a ``jobgate sessions rm``
would add the CLI's own start-up, about 1 s here, to every figure). Progress goes to
stderr; the last line of stdout is one JSON object.

    .venv/bin/python benchmarks/fgpu_requeue.py --rounds 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TypeVar

import httpx
from common import log, wait_for

from jobgate.localnet import free_port

T = TypeVar("T")
TARGET_S = 2.0
TERMINAL = {"SUCCEEDED", "FAILED", "TERMINATED", "CANCELLED", "ERROR"}
MOCK = """\
[[devices]]
kind = "cuda"
model = "Mock GPU 8GB"
memory = "8GiB"

[cuda]
mode = "fractional"
shares_per_device = 2
quantum = 0.1
"""


def start_up(root: Path) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    """``jobgate up`` with one mock GPU of 2 shares; a client with its admin key."""
    (root / "mock.toml").write_text(MOCK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env |= {
        "JOBGATE_MOCK_DEVICES": str(root / "mock.toml"),
        "JOBGATE_ACCELERATORS": "mock",
        "JOBGATE_CONFIG": str(root / "config.toml"),
    }
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "jobgate",
        "up",
        "--data-dir",
        str(root / "data"),
        "--port",
        str(port),
        "--proxy-port",
        str(free_port()),
        "--runtime",
        "process",
    ]
    log_path = root / "up.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    def ready() -> bool | None:
        if proc.poll() is not None:
            raise RuntimeError(f"jobgate up exited:\n{log_path.read_text(errors='replace')}")
        return True if "ready." in log_path.read_text(errors="replace") else None

    wait_for(ready, "jobgate up", timeout=120, every=0.2)
    key = (root / "data" / "admin.key").read_text().strip()
    api = httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    return proc, api


def status(api: httpx.Client, session_id: str) -> dict[str, Any]:
    r = api.get(f"/v1/sessions/{session_id}")
    r.raise_for_status()
    session: dict[str, Any] = r.json()
    return session


def one_round(api: httpx.Client) -> dict[str, float]:
    ids = []
    for _ in range(3):
        r = api.post(
            "/v1/sessions", json={"command": ["sleep", "600"], "resources": {"cuda.shares": "1"}}
        )
        r.raise_for_status()
        ids.append(r.json()["id"])

    def settled() -> tuple[list[str], str] | None:
        now = {i: status(api, i) for i in ids}
        running = [i for i in ids if now[i]["status"] == "RUNNING"]
        waiting = [
            i
            for i in ids
            if now[i]["status"] == "PENDING" and "no node fits" in (now[i]["pending_reason"] or "")
        ]
        return (running, waiting[0]) if len(running) == 2 and len(waiting) == 1 else None

    running, waiting = wait_for(settled, "2 running and 1 waiting", timeout=60, every=0.05)
    t0 = time.perf_counter()
    api.delete(f"/v1/sessions/{running[0]}").raise_for_status()
    seen: dict[str, float] = {}

    def started() -> bool | None:
        s = status(api, waiting)["status"]
        if s not in ("PENDING",) and "scheduled" not in seen:
            seen["scheduled"] = time.perf_counter() - t0
        if s == "RUNNING":
            seen["running"] = time.perf_counter() - t0
            return True
        if s in TERMINAL:
            raise RuntimeError(f"the waiting session ended {s}")
        return None

    wait_for(started, "the waiting session to run", timeout=60, every=0.005)
    for i in ids:
        api.delete(f"/v1/sessions/{i}", params={"force": True})
    wait_for(
        lambda: all(status(api, i)["status"] in TERMINAL for i in ids) or None,
        "the round's sessions to end",
        timeout=60,
        every=0.05,
    )
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fgpu-bench-") as tmp:
        proc, api = start_up(Path(tmp))
        try:
            rounds = []
            for n in range(args.rounds):
                seen = one_round(api)
                rounds.append(seen)
                log(
                    f"round {n + 1}: scheduled after {seen['scheduled']:.3f}s, "
                    f"running after {seen['running']:.3f}s"
                )
        finally:
            api.close()
            proc.terminate()
            proc.wait(60)
    latency = sorted(r["running"] for r in rounds)
    scheduled = sorted(r["scheduled"] for r in rounds)
    p90 = latency[min(len(latency) - 1, int(0.9 * len(latency)))]
    print(
        json.dumps(
            {
                "benchmark": "fgpu_requeue",
                "rounds": len(latency),
                "terminate_to_running_median_s": round(statistics.median(latency), 3),
                "terminate_to_running_p90_s": round(p90, 3),
                "terminate_to_running_max_s": round(latency[-1], 3),
                "terminate_to_scheduled_median_s": round(statistics.median(scheduled), 3),
                "target_s": TARGET_S,
                "within_target": latency[-1] <= TARGET_S,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
