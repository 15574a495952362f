"""Inference endpoint benchmark: what the endpoint data plane costs, and how it scales.

    wrk ──▶ one replica directly ───────────────────────────────────▶ replica 1
        ──▶ jobgate  /e/bench/ (token, p2c over ready replicas) ──┬─▶ replica 1
        ──▶ nginx    least_conn over the same replicas ───────────┴─▶ replica N

**Proxy overhead** (``overhead``): req/s and p50/p99 of small GETs through the endpoint
URL vs straight to one replica vs nginx balancing the same replicas, with the proxy's
CPU per request (wrk, ``--connections``); and the latency one request gains (wrk with
one connection: ``one_connection``, ``p50_overhead_ms``). The replicas are
benchmarks/proxy.py's small raw-ASGI upstream (uvicorn),
so the proxies, not the replicas, are what is measured. The route is written to Redis
as the endpoint controller writes it (``write_endpoint_route``), with the replicas
``serving``; the proxy probes them before the clock starts. Goals: jobgate >= 0.5x
nginx's req/s, p50 <= 1 ms over direct.

**Cold start, scale-up step, rolling update** need the endpoint controller (``jobgate
up``): they are reported as ``not_measured`` with the reason until that runs here.

Helpers (wrk and nginx on first use, process handling, Redis, medians) come from
benchmarks/proxy.py. Progress goes to stderr; the last line of stdout is one JSON object.

    .venv/bin/python benchmarks/endpoints.py --duration 5 --rounds 3 --replicas 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import proxy as bench

from jobgate.localnet import free_port, wait_port

ROOT = bench.ROOT
TOKEN = "jge_benchmark-token-0123456789abcdef"
NAME = "bench"
ENDPOINT_ID = "bench-endpoint"


def write_route(redis_url: str, upstreams: list[str]) -> None:
    from redis.asyncio import Redis

    from contract.endpoints import (
        EndpointRoute,
        Probe,
        ReplicaTarget,
        TokenGrant,
        token_digest,
        write_endpoint_route,
    )

    route = EndpointRoute(
        endpoint_id=ENDPOINT_ID,
        name=NAME,
        owner_id="bench-user",
        replicas=tuple(
            ReplicaTarget(
                session_id=f"replica-{i}", index=i, revision=1, upstream=url, state="serving"
            )
            for i, url in enumerate(upstreams)
        ),
        tokens=(TokenGrant(id="bench", digest=token_digest(TOKEN)),),
        probe=Probe(path="/", interval_s=1.0),
        concurrency_per_replica=1024,  # measure the proxy, not its queue
    )

    async def write() -> None:
        redis = Redis.from_url(redis_url)
        try:
            await write_endpoint_route(redis, route)
        finally:
            await redis.aclose()

    asyncio.run(write())


def wait_ready(redis_url: str, count: int, timeout: float = 30.0) -> None:
    """Until the proxy has probed every replica ready (its verdicts are in Redis)."""
    import redis

    from contract.keys import endpoint_ready_key

    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            verdicts = client.hgetall(endpoint_ready_key(ENDPOINT_ID))
            if sum(json.loads(v)["ready"] for v in verdicts.values()) >= count:
                return
            time.sleep(0.1)
    finally:
        client.close()
    raise RuntimeError("the proxy never saw the replicas ready")


@contextmanager
def overhead_targets(
    args: argparse.Namespace, tools: dict[str, str | None]
) -> Iterator[dict[str, Any]]:
    """Replicas, Redis, jobgate's proxy and nginx; name -> (URL, headers, pid)."""
    workdir = Path(tempfile.mkdtemp(prefix="jobgate-bench-endpoints-"))
    procs = bench.Processes(workdir)
    try:
        python = sys.executable
        ports = []
        for _ in range(args.replicas):
            port = free_port()
            procs.start(
                [python, bench.__file__, "--serve-upstream", str(port)], cpus=args.load_cpus
            )
            ports.append(port)
        for port in ports:
            wait_port(port)
        upstreams = [f"http://127.0.0.1:{p}" for p in ports]
        found: dict[str, Any] = {"direct": (upstreams[0], (), None)}
        redis_url = bench.start_redis(procs, workdir)
        write_route(redis_url, upstreams)
        port = free_port()
        pid = procs.start(
            [python, "-c", "from appproxy.server import serve; serve()"],
            env={
                "JOBGATE_PROXY_SECRET": bench.SECRET,
                "JOBGATE_REDIS_URL": redis_url,
                "JOBGATE_PROXY_PORT": str(port),
                "JOBGATE_PROXY_WORKERS": str(args.workers),
                "JOBGATE_GATEWAY_URL": "http://127.0.0.1:9",
                "PYTHONPATH": str(ROOT),
            },
            cpus=args.proxy_cpus,
        )
        wait_port(port)
        wait_ready(redis_url, args.replicas)
        auth = (f"Authorization: Bearer {TOKEN}",)
        found["jobgate"] = (f"http://127.0.0.1:{port}/e/{NAME}", auth, pid)
        if tools["nginx"]:
            port = free_port()
            conf = workdir / "nginx.conf"
            # the template's one "server" line becomes the replica list, least_conn first
            servers = "; server 127.0.0.1:".join(str(p) for p in ports) + "; least_conn"
            conf.write_text(
                bench.NGINX_CONF.format(
                    workers=args.workers, dir=workdir, upstream=servers, port=port
                )
            )
            pid = procs.start(
                [tools["nginx"], "-p", str(workdir), "-c", str(conf)], cpus=args.proxy_cpus
            )
            wait_port(port)
            found["nginx"] = (f"http://127.0.0.1:{port}", (), pid)
        time.sleep(1.0)  # let the proxies settle (every worker's subscription and probes)
        yield found
    finally:
        procs.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def check(url: str, headers: tuple[str, ...]) -> None:
    import httpx

    sent = dict(h.split(": ", 1) for h in headers)
    response = httpx.get(url + "/small", headers=sent)
    if response.status_code != 200 or response.content != bench.BODY:
        raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:200]}")


def overhead(args: argparse.Namespace) -> dict[str, Any]:
    install = not args.no_install
    tools = {
        "wrk": bench.find_or_install("wrk", "wrk", install),
        "nginx": bench.find_or_install("nginx", "nginx", install),
    }
    missing = sorted(name for name, path in tools.items() if not path)
    if not tools["wrk"]:
        return {"not_measured": "wrk is missing", "missing": missing}
    wrk = tools["wrk"]
    # throughput: wrk with --connections; latency: one connection, one request at a time
    # (the latency a request gains, not the queueing of a saturated proxy)
    single = argparse.Namespace(**{**vars(args), "connections": 1, "wrk_threads": 1})
    samples: dict[str, list[dict[str, Any]]] = {}
    single_samples: dict[str, list[dict[str, Any]]] = {}
    with overhead_targets(args, tools) as found:
        for url, headers, _ in found.values():
            check(url, headers)
        for number in range(1, args.rounds + 1):
            for name, (url, headers, pid) in found.items():
                run = partial(bench.run_wrk, wrk, url + "/small", args, None, headers)
                sample = bench.measured(pid, "req_per_s", run)
                samples.setdefault(name, []).append(sample)
                bench.log(f"round {number} {name}: {sample}")
                run = partial(bench.run_wrk, wrk, url + "/small", single, None, headers)
                sample = bench.measured(None, "req_per_s", run)
                single_samples.setdefault(name, []).append(sample)
                bench.log(f"round {number} {name}, one connection: {sample}")
    http = {name: bench.median_of(s) for name, s in samples.items()}
    one = {name: bench.median_of(s) for name, s in single_samples.items()}
    jobgate, nginx, direct = http.get("jobgate"), http.get("nginx"), http.get("direct")

    def added_p50(name: str) -> float | None:
        if name not in one or "direct" not in one:
            return None
        return round(one[name]["p50_ms"] - one["direct"]["p50_ms"], 3)

    p50_overhead = added_p50("jobgate")
    vs_nginx = bench.ratio(jobgate, nginx, "req_per_s")
    return {
        "replicas": args.replicas,
        "missing": missing,
        "http": http,
        "one_connection": one,
        "jobgate_vs_nginx_req_per_s": vs_nginx,
        "jobgate_vs_direct_req_per_s": bench.ratio(jobgate, direct, "req_per_s"),
        "p50_overhead_ms": p50_overhead,
        "p50_overhead_nginx_ms": added_p50("nginx"),
        "goals": {
            "req_per_s_ge_half_nginx": vs_nginx is not None and vs_nginx >= 0.5,
            "p50_overhead_le_1ms": p50_overhead is not None and p50_overhead <= 1.0,
        },
    }


def needs_controller(part: str) -> dict[str, Any]:
    """Cold start, scale-up and rolling update run against ``jobgate up`` with the
    endpoint controller; this branch has only the proxy's side."""
    return {"not_measured": f"{part} needs the endpoint controller (jobgate up)"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections")
    parser.add_argument("--wrk-threads", type=int, default=1)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes for jobgate and nginx alike"
    )
    parser.add_argument("--no-install", action="store_true", help="do not apt-get install")
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="proxies on CPU 0, load generator and replicas on the others",
    )
    args = parser.parse_args()
    args.proxy_cpus = args.load_cpus = None
    if args.isolate:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            parser.error("--isolate needs at least two CPUs")
        args.proxy_cpus, args.load_cpus = {cpus[0]}, set(cpus[1:])
    return args


def main() -> None:
    args = parse_args()
    result = {
        "cpu_count": os.cpu_count(),
        "workers": args.workers,
        "duration_s": args.duration,
        "rounds": args.rounds,
        "wrk": {"threads": args.wrk_threads, "connections": args.connections},
        "isolated": args.isolate,
        "overhead": overhead(args),
        "cold_start": needs_controller("cold start from zero"),
        "scale_up_step": needs_controller("the 8x step"),
        "rolling_update": needs_controller("a rolling update under load"),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
