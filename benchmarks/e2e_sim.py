"""Sessions through the real stack onto simulated nodes: how fast do they reach RUNNING?

    python benchmarks/e2e_sim.py --sessions 2000 --nodes 100
    python benchmarks/e2e_sim.py --sessions 20000 --nodes 1000      # the scheduler issue's goal

Starts its own gateway, scheduler and one sim worker hosting ``--nodes`` simulated nodes
(processes, as in production) on PostgreSQL (a fresh database on ``--pg``) and a private
redis-server, then measures two things:

* **burst** - ``--sessions`` batch sessions are submitted through the HTTP API while a
  resource policy holds them back (``max_sessions = 0``); one API call lifts the policy,
  and ``running_per_s`` is sessions reaching RUNNING per second from that call until the
  last one runs: the scheduler, its plan applier, the start jobs, the worker and the
  event consumer, with nothing else competing for the two cores;
* **stream** (``--stream N``) - N more sessions submitted while the cluster takes them:
  ``stream_running_per_s`` from the first submission until the last one runs.

Also ``api_p50_ms`` / ``api_p99_ms`` (``POST /v1/sessions``), ``submit_per_s``, and
``max_pass_s``, the slowest scheduling pass (from the scheduler's log). The last line of
output is one JSON object with these figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import asyncpg
import httpx
from common import percentile

from jobgate.localnet import free_port, redis_server_argv

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="jobgate-bench-"))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.port = free_port()
        self.db_name = f"jobgate_bench_{uuid.uuid4().hex[:8]}"
        base = args.pg.rsplit("/", 1)[0]
        self.db_url = f"{base}/{self.db_name}"
        self.redis_url = ""
        self.key = ""

    # -- set-up -----------------------------------------------------------------------
    async def setup(self) -> None:
        env = await self.setup_gateway()
        self.spawn("scheduler", [sys.executable, "-m", "jobgate", "scheduler", "run"], env)
        await self.setup_worker(env)

    async def setup_gateway(self) -> dict[str, str]:
        """A fresh database, a private Redis and the gateway; the environment they share."""
        conn = await asyncpg.connect(self.args.pg)
        await conn.execute(f'CREATE DATABASE "{self.db_name}"')
        await conn.close()
        redis_port = free_port()
        self.spawn("redis", redis_server_argv(self.tmp, port=redis_port))
        self.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        env = self.env()
        upgrade = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "jobgate",
            "db",
            "upgrade",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        if await upgrade.wait() != 0:
            raise RuntimeError("jobgate db upgrade failed")
        self.key = await self.bootstrap()
        self.spawn(
            "gateway",
            [sys.executable, "-m", "jobgate", "gateway", "serve", "--port", str(self.port)],
            env,
        )
        await self.wait_http(f"http://127.0.0.1:{self.port}/healthz")
        return env

    async def setup_worker(self, env: dict[str, str]) -> None:
        self.spawn(
            "worker",
            [
                sys.executable,
                "-m",
                "jobgate",
                "worker",
                "run",
                "--runtime",
                "sim",
                "--sim-nodes",
                str(self.args.nodes),
                "--node-id",
                "sim",
                "--cpu",
                "32",
                "--mem",
                "256g",
            ],
            env | {"JOBGATE_ACCELERATORS": "none"},
        )
        await self.wait_nodes()

    def env(self) -> dict[str, str]:
        return os.environ | {
            "JOBGATE_DATABASE_URL": self.db_url,
            "JOBGATE_REDIS_URL": self.redis_url,
            "JOBGATE_DATA_DIR": str(self.tmp),
            "JOBGATE_NODE_TOKEN": "jgn_bench",
            "JOBGATE_PROXY_SECRET": "bench-proxy-secret-0123456789",
            "JOBGATE_GATEWAY_URL": f"http://127.0.0.1:{self.port}",
            "JOBGATE_LOG_LEVEL": "INFO",
        }

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.tmp / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)

    async def bootstrap(self) -> str:
        from gateway.bootstrap import ensure_admin_key, ensure_default_group
        from gateway.config import async_database_url
        from gateway.db.engine import create_engine, create_session_factory

        engine = create_engine(async_database_url(self.db_url))
        async with create_session_factory(engine)() as db, db.begin():
            await ensure_default_group(db)
            key = await ensure_admin_key(db)
        await engine.dispose()
        return key

    async def wait_http(self, url: str) -> None:
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                try:
                    if (await client.get(url)).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{url} did not answer; see {self.tmp}")

    async def wait_nodes(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        async with httpx.AsyncClient(headers=headers) as client:
            for _ in range(600):
                nodes = (await client.get(f"http://127.0.0.1:{self.port}/v1/nodes")).json()
                if sum(n["status"] == "ready" for n in nodes["items"]) >= self.args.nodes:
                    return
                await asyncio.sleep(0.2)
        raise RuntimeError(f"the sim nodes did not register; see {self.tmp}/worker.log")

    # -- the run ----------------------------------------------------------------------
    async def submit(self, count: int, latencies: list[float]) -> None:
        """*count* sessions through the API, ``--concurrency`` requests at a time (aiohttp:
        a light client, so the load generator takes little of the CPU it measures)."""
        body = {
            "command": ["sim"],
            "env": {"JOBGATE_SIM_DURATION": "3600"},
            "resources": {"cpu": "1", "mem": "1g"},
        }
        headers = {"Authorization": f"Bearer {self.key}"}
        url = f"http://127.0.0.1:{self.port}/v1/sessions"
        left = count
        connector = aiohttp.TCPConnector(limit=self.args.concurrency)
        async with aiohttp.ClientSession(connector=connector, headers=headers) as client:

            async def one_client() -> None:
                nonlocal left
                while left > 0:
                    left -= 1
                    t0 = time.perf_counter()
                    async with client.post(url, json=body) as r:
                        await r.read()
                        if r.status != 201:
                            raise RuntimeError(f"create failed: {r.status} {await r.text()}")
                    latencies.append(time.perf_counter() - t0)

            await asyncio.gather(*(one_client() for _ in range(self.args.concurrency)))

    async def policy(self, max_sessions: int | None) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        async with httpx.AsyncClient(headers=headers) as client:
            r = await client.put(
                f"http://127.0.0.1:{self.port}/v1/policies/user/admin",
                json={"max_sessions": max_sessions},
            )
            r.raise_for_status()

    async def wait_running(self, conn: asyncpg.Connection, target: int, start: float) -> float:
        last = start
        while True:
            n: int = await conn.fetchval("SELECT count(*) FROM sessions WHERE status = 'RUNNING'")
            now = time.perf_counter()
            if now - last >= 2:
                print(f"  {now - start:6.1f}s: {n:6d} running", flush=True)
                last = now
            if n >= target or now - start > self.args.timeout:
                return now - start
            await asyncio.sleep(0.05)

    async def run(self) -> dict[str, object]:
        conn = await asyncpg.connect(self.db_url)
        latencies: list[float] = []
        await self.policy(0)  # hold everything back while the queue fills
        t0 = time.perf_counter()
        await self.submit(self.args.sessions, latencies)
        submit_s = time.perf_counter() - t0
        print(f"  submitted {self.args.sessions} in {submit_s:.1f}s; releasing", flush=True)
        start = time.perf_counter()
        await self.policy(None)
        burst_s = await self.wait_running(conn, self.args.sessions, start)
        burst_n = await self.running(conn)
        result: dict[str, object] = {
            "sessions": self.args.sessions,
            "nodes": self.args.nodes,
            "reached_running": burst_n,
            "running_per_s": round(burst_n / burst_s, 1),
            "burst_seconds": round(burst_s, 2),
            "submit_per_s": round(len(latencies) / submit_s, 1),
            "api_p50_ms": round(statistics.median(latencies) * 1000, 1),
            "api_p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        }
        if self.args.stream:
            start = time.perf_counter()
            await self.submit(self.args.stream, [])
            stream_s = await self.wait_running(conn, burst_n + self.args.stream, start)
            result["stream_sessions"] = self.args.stream
            result["stream_running_per_s"] = round(
                (await self.running(conn) - burst_n) / stream_s, 1
            )
        await conn.close()
        passes = self.passes()
        result["passes"] = len(passes)
        result["max_pass_s"] = round(max(passes), 3) if passes else None
        result["concurrency"] = self.args.concurrency
        return result

    async def running(self, conn: asyncpg.Connection) -> int:
        count: int = await conn.fetchval("SELECT count(*) FROM sessions WHERE status = 'RUNNING'")
        return count

    def passes(self) -> list[float]:
        text = (self.tmp / "scheduler.log").read_text(errors="replace")
        return [float(m) for m in re.findall(r"placed, \d+ cancelled, ([0-9.]+)s", text)]

    # -- tear-down --------------------------------------------------------------------
    async def teardown(self) -> None:
        for name in ("worker", "scheduler", "gateway", "redis"):
            proc = self.procs.get(name)
            if proc and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        conn = await asyncpg.connect(self.args.pg)
        await conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        await conn.close()
        if not self.args.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


def add_pg_argument(parser: argparse.ArgumentParser) -> None:
    """--pg: the PostgreSQL admin URL the benchmark makes its database with."""
    parser.add_argument(
        "--pg",
        default=os.environ.get(
            "JOBGATE_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )


async def measure(bench: Bench) -> None:
    """Set *bench* up, run it, tear it down; print its result as the JSON last line."""
    try:
        await bench.setup()
        result = await bench.run()
    finally:
        await bench.teardown()
    print(json.dumps(result))


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--stream", type=int, default=0, help="then N more, submitted live")
    parser.add_argument("--timeout", type=float, default=600)
    add_pg_argument(parser)
    parser.add_argument("--keep", action="store_true", help="keep the logs directory")
    args = parser.parse_args()
    print(f"e2e_sim: {args.sessions} sessions onto {args.nodes} simulated nodes", flush=True)
    await measure(Bench(args))


if __name__ == "__main__":
    asyncio.run(main())
