"""Cold start through jobgate against a bare ``podman run`` of the same image and command.

    .venv/bin/python benchmarks/cold_start.py --n 20

Starts its own stack (``jobgate up --runtime podman`` in a temporary data directory, on
free ports, with its private Redis and SQLite; PostgreSQL with ``--database-url``) and
stops it at the end. Then, N times, interleaved so both see the same machine load:

* jobgate: ``POST /v1/sessions`` (a cached image, ``echo hello`` then a short sleep, so
  RUNNING can be seen before the end), then ``GET .../logs?follow=true`` (SSE): the time
  from the POST to the ``status`` event RUNNING and to the first ``log`` event;
* bare: ``runuser -u USER -- env XDG_RUNTIME_DIR=/run/user/UID podman run --rm IMAGE ...``
  with the same command: the time to its first line of output.

Rounds alternate which of the two goes first and pause ``--pause`` seconds between runs,
so one run's clean-up (a container being removed) does not land in the other's figures.

It prints the figures, a breakdown of where jobgate's time goes (from the session's status
history and log rows, stamped by the database clock on this same host) and, with
``--trace``, a finer one hop by hop (every queue operation seen through Redis ``MONITOR``
on the stack's private Redis; MONITOR itself costs Redis a little). The last line is one
JSON object. Goal: the median overhead of jobgate over bare Podman (first line, paired per
round) <= 150 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import redis

from jobgate.localnet import free_port

GOAL_MS = 150.0
COMMAND = ["sh", "-c", "echo hello; sleep 0.3"]
PHASES = {
    "api_create": "POST until the session row exists (request, auth, insert)",
    "schedule": "row -> SCHEDULED (schedule job, snapshot, plan, apply, start job)",
    "node_pickup": "SCHEDULED -> PREPARING recorded (node queue, worker, event reporting)",
    "start": "PREPARING -> RUNNING recorded (prepare, create, start, event reporting)",
    "log_row": "RUNNING recorded -> first log row stored",
    "delivery": "first log row stored -> the SSE client has the line",
}


def say(message: str) -> None:
    print(message, flush=True)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(values), 1),
        "p90_ms": round(percentile(values, 90), 1),
        "min_ms": round(min(values), 1),
        "max_ms": round(max(values), 1),
    }


# -- the stack ---------------------------------------------------------------------------
@dataclass
class UpStack:
    """``jobgate up`` as a child process; its data directory is thrown away afterwards."""

    data_dir: Path
    database_url: str | None
    egress: str = "open"
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def redis_socket(self) -> str:
        """Where ``jobgate up`` puts its private Redis (the data directory is short here)."""
        return str(self.data_dir / "redis.sock")

    @property
    def redis_password(self) -> str:
        """The password of its `default` user, kept in DATA_DIR/secrets.json."""
        kept: dict[str, str] = json.loads((self.data_dir / "secrets.json").read_text())
        return kept.get("redis_password", "")

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / "up.log"

    def start(self, timeout: float = 120.0) -> str:
        """Start it; returns the admin API key once a podman node is ready."""
        env = dict(os.environ)
        env.pop("JOBGATE_REDIS_URL", None)  # its own private Redis
        env.pop("JOBGATE_DATABASE_URL", None)
        env["JOBGATE_CONFIG"] = str(self.data_dir.parent / "config.toml")  # not the user's
        if self.database_url:
            env["JOBGATE_DATABASE_URL"] = self.database_url
        env["JOBGATE_DEFAULT_EGRESS"] = self.egress  # the local group's
        argv = [sys.executable, "-m", "jobgate", "up", "--runtime", "podman"]
        argv += ["--data-dir", str(self.data_dir), "--port", str(self.port)]
        argv += ["--proxy-port", str(free_port())]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        key_file = self.data_dir / "admin.key"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jobgate up exited:\n{self.log_path.read_text()[-3000:]}")
            if key_file.exists() and self._podman_node(key_file.read_text().strip()):
                return key_file.read_text().strip()
            time.sleep(0.2)
        raise RuntimeError(f"no podman node within {timeout:.0f}s:\n{self.log_path.read_text()}")

    def _podman_node(self, key: str) -> bool:
        try:
            r = httpx.get(
                f"{self.url}/v1/nodes", headers={"Authorization": f"Bearer {key}"}, timeout=2
            )
            nodes = r.json()["items"] if r.status_code == 200 else []
        except httpx.HTTPError:
            return False
        return any(n["status"] == "ready" and n["runtime"] == "podman" for n in nodes)

    def show_logs(self, lines: int = 30) -> None:
        for path in sorted((self.data_dir / "logs").glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            print(f"--- {path.name} (last {lines} lines)", *tail, sep="\n", file=sys.stderr)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)  # `jobgate up` stops its parts in order
        try:
            self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@contextmanager
def up_stack(database_url: str | None, egress: str = "open") -> Iterator[tuple[UpStack, str]]:
    with tempfile.TemporaryDirectory(prefix="jobgate-cold-start-") as tmp:
        stack = UpStack(Path(tmp) / "data", database_url, egress)
        try:
            key = stack.start()
            yield stack, key
        except BaseException:
            stack.show_logs()  # the directory goes with the stack: say what happened first
            raise
        finally:
            stack.stop()


# -- the hop-by-hop trace (--trace) ---------------------------------------------------------
HOPS = {
    "schedule_enqueued": "the gateway committed the session and asked for a pass",
    "schedule_picked": "the scheduler took the schedule job",
    "start_enqueued": "the pass placed it and queued the start job on the node",
    "start_picked": "the worker took the start job",
    "running_reported": "prepare + create + start done, 'running' event queued",
    "running_picked": "the gateway's event consumer took that batch",
    "running_published": "RUNNING committed and published to followers",
    "log_published": "the first output stored and published to followers",
}


class RedisTrace:
    """Every command the stack's private Redis runs, with Redis's own timestamps."""

    def __init__(self, socket_path: str, password: str) -> None:
        self.commands: list[tuple[float, str]] = []
        args = (socket_path, password)
        self._thread = threading.Thread(target=self._listen, args=args, daemon=True)
        self._thread.start()

    def _listen(self, socket_path: str, password: str) -> None:
        client = redis.Redis(unix_socket_path=socket_path, password=password or None)
        try:
            with client.monitor() as monitor:  # type: ignore[no-untyped-call]
                for item in monitor.listen():
                    command = str(item["command"]).replace('": ', '":')  # one JSON spelling
                    self.commands.append((float(item["time"]), command))
        except (redis.RedisError, OSError, ValueError):
            return  # the stack went away

    def _first(self, after: float, prefix: str, *contains: str) -> float:
        for at, command in list(self.commands):
            if at >= after and command.startswith(prefix) and all(c in command for c in contains):
                return at
        return float("nan")

    def hops(self, wall0: float, session_id: str, kernel_id: str) -> dict[str, float]:
        """ms after the POST at which each hop happened, for one session."""
        t: dict[str, float] = {}
        t["schedule_enqueued"] = self._first(wall0, "ZADD jobgate:queue:scheduler")
        t["schedule_picked"] = self._first(
            t["schedule_enqueued"], "PSETEX arq:in-progress:schedule"
        )
        t["start_enqueued"] = self._first(wall0, "ZADD", f"start:{kernel_id}")
        # a node's jobs are n:{node}:..., its events e:{node}:... (contract/keys.py)
        t["start_picked"] = self._first(wall0, "PSETEX arq:in-progress:n:", f":start:{kernel_id}")
        t["running_reported"] = self._first(
            wall0, "PSETEX arq:job:e:", kernel_id, '"kind":"running"'
        )
        t["running_picked"] = self._first(t["running_reported"], "PSETEX arq:in-progress:e:")
        live = f"XADD jobgate:live:{session_id}"
        t["running_published"] = self._first(wall0, live, '"status":"RUNNING"')
        t["log_published"] = self._first(wall0, live, '"type":"log"')
        return {name: (at - wall0) * 1000 for name, at in t.items()}


# -- one jobgate session -----------------------------------------------------------------
@dataclass
class Sample:
    running_ms: float
    first_line_ms: float
    phases: dict[str, float]
    hops: dict[str, float]


def _wall(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def _sse(api: httpx.AsyncClient, session_id: str, t0: float) -> tuple[float, float]:
    """Follow the session's logs: (ms to the RUNNING status event, ms to the first line)."""
    running = first = -1.0
    event = ""
    url = f"/v1/sessions/{session_id}/logs"
    async with api.stream("GET", url, params={"follow": "true"}) as response:
        async for line in response.aiter_lines():
            now = (time.monotonic() - t0) * 1000
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = json.loads(line.removeprefix("data: "))
                if event == "status" and data["status"] == "RUNNING" and running < 0:
                    running = now
                elif event == "log" and first < 0:
                    first = now
                elif event == "end":
                    if data["status"] != "SUCCEEDED":
                        raise RuntimeError(f"session {session_id} ended {data}")
                    break
    if running < 0 or first < 0:
        raise RuntimeError(f"session {session_id}: no RUNNING status or no output seen")
    return running, first


async def jobgate_once(api: httpx.AsyncClient, image: str, trace: RedisTrace | None) -> Sample:
    wall0, t0 = time.time(), time.monotonic()
    r = await api.post("/v1/sessions", json={"image": image, "command": COMMAND})
    r.raise_for_status()
    session_id = r.json()["id"]
    running, first = await _sse(api, session_id, t0)
    session = (await api.get(f"/v1/sessions/{session_id}")).json()
    logs = (await api.get(f"/v1/sessions/{session_id}/logs", params={"format": "json"})).json()
    at = {h["to_status"]: _wall(h["at"]) for h in session["history"]}
    created, log_row = _wall(session["created_at"]), _wall(logs["items"][0]["at"])
    ms = 1000.0
    phases = {
        "api_create": (created - wall0) * ms,
        "schedule": (at["SCHEDULED"] - created) * ms,
        "node_pickup": (at["PREPARING"] - at["SCHEDULED"]) * ms,
        "start": (at["RUNNING"] - at["PREPARING"]) * ms,
        "log_row": (log_row - at["RUNNING"]) * ms,
        "delivery": (wall0 + first / ms - log_row) * ms,
    }
    hops = trace.hops(wall0, session_id, session["kernels"][0]["id"]) if trace else {}
    if hops:
        hops["sse_first_line"] = first
    return Sample(running, first, phases, hops)


# -- one bare podman run -----------------------------------------------------------------
async def bare_once(user: pwd.struct_passwd, image: str) -> float:
    """ms from launching ``podman run`` (as the Podman user) to its first line of output."""
    argv = ["runuser", "-u", user.pw_name, "--", "env", f"XDG_RUNTIME_DIR=/run/user/{user.pw_uid}"]
    argv += [f"HOME={user.pw_dir}", "podman", "run", "--rm", image, *COMMAND]
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=user.pw_dir, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    line = await proc.stdout.readline()
    first = (time.monotonic() - t0) * 1000
    _, err = await proc.communicate()
    if line != b"hello\n" or proc.returncode != 0:
        raise RuntimeError(f"bare podman run failed ({proc.returncode}): {line!r} {err!r}")
    return first


# -- the run -----------------------------------------------------------------------------
def _medians(samples: list[Sample], attr: str) -> dict[str, float]:
    rows: list[dict[str, float]] = [getattr(s, attr) for s in samples]
    if not rows or not rows[0]:
        return {}
    return {name: round(statistics.median(r[name] for r in rows), 1) for name in rows[0]}


async def measure(
    url: str, key: str, args: argparse.Namespace, trace: RedisTrace | None
) -> dict[str, Any]:
    user = pwd.getpwnam(args.user)
    headers = {"Authorization": f"Bearer {key}"}
    samples: list[Sample] = []
    bare: list[float] = []
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as api:
        say("warming up (one of each, not counted)")
        await jobgate_once(api, args.image, None)
        await bare_once(user, args.image)
        for i in range(args.n):
            for kind in ("jobgate", "bare") if i % 2 == 0 else ("bare", "jobgate"):
                await asyncio.sleep(args.pause)  # the previous run's clean-up is done
                if kind == "jobgate":
                    samples.append(await jobgate_once(api, args.image, trace))
                else:
                    bare.append(await bare_once(user, args.image))
            s = samples[-1]
            say(
                f"  {i + 1:3d}/{args.n}: jobgate running {s.running_ms:6.0f} ms, first line "
                f"{s.first_line_ms:6.0f} ms | bare podman first line {bare[-1]:6.0f} ms"
            )
    first = [s.first_line_ms for s in samples]
    paired = [j - b for j, b in zip(first, bare, strict=True)]
    return {
        "jobgate_running": summary([s.running_ms for s in samples]),
        "jobgate_first_line": summary(first),
        "bare_podman_first_line": summary(bare),
        "overhead_paired": summary(paired),
        "overhead_of_medians_ms": round(statistics.median(first) - statistics.median(bare), 1),
        "phases_median_ms": _medians(samples, "phases"),
        "hops_median_ms_after_post": _medians(samples, "hops"),
    }


def report(result: dict[str, Any], args: argparse.Namespace, database: str) -> None:
    say("")
    say(
        f"cold start, n={args.n}, image {args.image}, command {' '.join(COMMAND)!r}, "
        f"{database}, egress {args.egress}"
    )
    for name in ("jobgate_running", "jobgate_first_line", "bare_podman_first_line"):
        r = result[name]
        say(f"  {name:24s} median {r['median_ms']:7.1f} ms   p90 {r['p90_ms']:7.1f} ms")
    overhead = result["overhead_paired"]
    say(
        f"  overhead (paired)        median {overhead['median_ms']:7.1f} ms   "
        f"p90 {overhead['p90_ms']:7.1f} ms   (goal <= {GOAL_MS:.0f} ms: "
        f"{'met' if result['goal_met'] else 'NOT met'})"
    )
    say("  where jobgate's time goes (medians; database clock, same host):")
    for name, what in PHASES.items():
        say(f"    {name:12s} {result['phases_median_ms'][name]:7.1f} ms  {what}")
    hops = result["hops_median_ms_after_post"]
    if hops:
        say("  hop by hop (medians, ms after the POST, from Redis MONITOR):")
        for name, what in [*HOPS.items(), ("sse_first_line", "the SSE client has the line")]:
            say(f"    {name:18s} {hops[name]:7.1f}  {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="sessions (and bare runs) to time")
    parser.add_argument("--image", default="localhost/jobgate-busybox:latest")
    parser.add_argument("--user", default=os.environ.get("JOBGATE_PODMAN_USER", "jobgate"))
    parser.add_argument("--database-url", help="PostgreSQL URL (default: SQLite in the data dir)")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between runs")
    parser.add_argument("--trace", action="store_true", help="hop-by-hop times (Redis MONITOR)")
    parser.add_argument(
        "--egress",
        choices=["open", "no-private", "none"],
        default="open",
        help="the sessions' group egress (no-private and none load nftables rules per start)",
    )
    args = parser.parse_args()
    if args.n < 1:
        parser.error("--n must be at least 1")
    database = "PostgreSQL" if args.database_url else "SQLite"
    say(f"starting jobgate up --runtime podman ({database}, private Redis)")
    with up_stack(args.database_url, args.egress) as (stack, key):
        say(f"stack ready at {stack.url}")
        trace = RedisTrace(stack.redis_socket, stack.redis_password) if args.trace else None
        result = asyncio.run(measure(stack.url, key, args, trace))
    result["goal_met"] = result["overhead_paired"]["median_ms"] <= GOAL_MS
    report(result, args, database)
    result |= {"n": args.n, "image": args.image, "database": database, "goal_ms": GOAL_MS}
    result["egress"] = args.egress
    print(json.dumps(result, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
