"""How long the ``jobgate`` command takes to start: ``--version``, ``--help`` and
``sessions ls``, each run as a fresh process.

    python benchmarks/cli_start.py --runs 20
    python benchmarks/cli_start.py --url http://127.0.0.1:8420   # ls against a real stack

``sessions ls`` asks ``--url`` (default: a loopback port nothing listens on, so it fails
at once after importing everything it needs; the profile is a missing file either way,
so the key comes from ``JOBGATE_API_KEY`` if set). Each command runs ``--warmup`` times
untimed, then ``--runs`` times; the median and the best wall times are reported.

Goal (issue 32): every command starts in under 0.25 s (median) on the 2-core build
machine; anchor before that issue: ``--version`` 0.71 s, every command about 0.56 s of
imports.

Prints one line per command on stderr and, last, one line of JSON: per command
``median_s`` and ``best_s`` (wall) and ``cpu_s`` (the median user + system time, which a
busy machine disturbs less), plus ``goal_s`` and ``load_avg_1m`` (before the run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 0.25
COMMANDS = {
    "--version": ["--version"],
    "--help": ["--help"],
    "sessions ls": ["sessions", "ls"],
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _time(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "jobgate", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--url", default="", help="the API sessions ls asks (default: none)")
    options = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        env = os.environ | {
            "JOBGATE_CONFIG": str(Path(tmp) / "absent.toml"),
            "JOBGATE_URL": options.url or f"http://127.0.0.1:{_closed_port()}",
        }
        env.setdefault("JOBGATE_API_KEY", "jg_benchmark")
        results: dict[str, dict[str, float]] = {}
        for name, args in COMMANDS.items():
            for _ in range(options.warmup):
                _time(args, env)
            runs = [_time(args, env) for _ in range(options.runs)]
            walls = [wall for wall, _ in runs]
            median, best = statistics.median(walls), min(walls)
            cpu = statistics.median(cpu for _, cpu in runs)
            results[name] = {
                "median_s": round(median, 3),
                "best_s": round(best, 3),
                "cpu_s": round(cpu, 3),
            }
            verdict = "ok" if median < GOAL_S else "over"
            print(
                f"jobgate {name:<12} median {median:.3f} s  best {best:.3f} s  "
                f"cpu {cpu:.3f} s  (goal < {GOAL_S} s: {verdict})",
                file=sys.stderr,
            )
    print(json.dumps(results | {"goal_s": GOAL_S, "load_avg_1m": round(load, 2)}))


if __name__ == "__main__":
    main()
