"""``POST /v1/sessions`` under load, and session arrays: how many creates a second?

    python benchmarks/api_create.py --requests 20000 --concurrency 32
    python benchmarks/api_create.py --array 10000          # also one 10,000-session array

Starts one ``jobgate gateway serve`` process on a fresh PostgreSQL database (created on
``--pg``, dropped at the end), a private redis-server and one simulated node (so the
default group has a node shape, as in production) - no scheduler, so the sessions stay
PENDING and the gateway has the CPU to itself apart from the load generator and
PostgreSQL. The load generator is a few lines of raw asyncio (persistent
HTTP/1.1 connections, the request bytes built once), so it costs the machine little of
what it measures. Each of ``--concurrency`` clients sends its next request as soon as
its last one is answered; after ``--warmup`` requests, ``--requests`` are timed.

Goal (issue 17): >= 1,000 creates/s with p99 < 100 ms at 32 clients on the 2-core
build machine; anchor: 155 req/s, p50 193 ms, p99 499 ms before that issue. Arrays:
10,000 sessions in one call accepted in < 5 s.

Prints progress on stderr and, last, one line of JSON: ``req_per_s``, ``p50_ms``,
``p99_ms``, ``max_ms``, ``errors``, ``gateway_cpu_ms_per_req`` (the gateway process's
user+system CPU per request), ``load_avg_1m`` (before the run), and with ``--array``:
``array_count``, ``array_seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from common import percentile
from e2e_sim import Bench, add_pg_argument, measure

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class Client:
    """One keep-alive HTTP/1.1 connection that POSTs the same body again and again."""

    def __init__(self, port: int, request: bytes) -> None:
        self.port = port
        self.request = request
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        self.writer.write(self.request)
        status_line = await self.reader.readline()
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        await self.reader.readexactly(length)
        return int(status_line.split()[1])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def build_request(port: int, key: str, body: dict[str, object]) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


class ApiBench(Bench):
    async def setup(self) -> None:  # no scheduler: one simulated node, for its shape
        await self.setup_worker(await self.setup_gateway())

    async def load(self, n: int, latencies: list[float]) -> int:
        body: dict[str, object] = {"command": ["true"], "resources": {"cpu": "1", "mem": "1g"}}
        request = build_request(self.port, self.key, body)
        left = n
        errors = 0

        async def one_client() -> None:
            nonlocal left, errors
            client = Client(self.port, request)
            try:
                while left > 0:
                    left -= 1
                    t0 = time.perf_counter()
                    status = await client.post()
                    latencies.append(time.perf_counter() - t0)
                    errors += status != 201
            finally:
                client.close()

        await asyncio.gather(*(one_client() for _ in range(self.args.concurrency)))
        return errors

    def gateway_cpu_s(self) -> float:
        pid = self.procs["gateway"].pid
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def profile(self) -> subprocess.Popen[bytes] | None:
        """py-spy on the gateway while the timed requests run (``--profile FILE``)."""
        if not self.args.profile:
            return None
        argv = ["py-spy", "record", "-r", "200", "-p", str(self.procs["gateway"].pid)]
        argv += ["-f", "raw", "-o", self.args.profile]
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def array(self, count: int) -> tuple[float, dict[str, object]]:
        headers = {"Authorization": f"Bearer {self.key}"}
        body = {"command": ["true"], "resources": {"cpu": "1", "mem": "1g"}, "count": count}
        async with httpx.AsyncClient(headers=headers, timeout=120) as client:
            t0 = time.perf_counter()
            r = await client.post(f"http://127.0.0.1:{self.port}/v1/sessions", json=body)
            seconds = time.perf_counter() - t0
        if r.status_code != 201:
            raise RuntimeError(f"array create failed: {r.status_code} {r.text}")
        return seconds, r.json()

    async def run(self) -> dict[str, object]:
        load_avg = os.getloadavg()[0]
        await self.policy(0)  # the admin's sessions are never placed; none is needed here
        await self.load(self.args.warmup, [])
        latencies: list[float] = []
        spy = self.profile()
        cpu0, t0 = self.gateway_cpu_s(), time.perf_counter()
        errors = await self.load(self.args.requests, latencies)
        wall, cpu = time.perf_counter() - t0, self.gateway_cpu_s() - cpu0
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        result: dict[str, object] = {
            "requests": len(latencies),
            "concurrency": self.args.concurrency,
            "req_per_s": round(len(latencies) / wall, 1),
            "p50_ms": round(statistics.median(latencies) * 1000, 1),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
            "max_ms": round(max(latencies) * 1000, 1),
            "errors": errors,
            "gateway_cpu_ms_per_req": round(cpu * 1000 / len(latencies), 3),
            "load_avg_1m": round(load_avg, 2),
        }
        print(f"  creates: {result}", file=sys.stderr, flush=True)
        if self.args.array:
            seconds, view = await self.array(self.args.array)
            result["array_count"] = self.args.array
            result["array_seconds"] = round(seconds, 2)
            print(f"  array of {view.get('array_size')}: {seconds:.2f}s", file=sys.stderr)
        return result


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--array", type=int, default=0, help="then one array of N sessions")
    add_pg_argument(parser)
    parser.add_argument("--profile", help="py-spy (on PATH) the gateway: collapsed stacks")
    parser.add_argument("--keep", action="store_true", help="keep the logs directory")
    args = parser.parse_args()
    args.nodes = 1
    await measure(ApiBench(args))


if __name__ == "__main__":
    import uvloop  # a lighter load generator

    uvloop.run(main())
