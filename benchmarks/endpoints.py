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

**Cold start** (``cold_start``; ``cold_start_podman`` too when ``JOBGATE_PODMAN_SOCKET``
is set): ``jobgate up`` in a temporary directory; an endpoint running
``scripts/httpbench.py`` (a plain process, or the cached ``localhost/jobgate-httpbench``
image) with ``--min 0`` and a one-second idle window; each round waits until it is
SCALED_TO_ZERO, then times one request through the endpoint URL to its answer: the proxy
holds it and wakes the controller, the scheduler places a replica, the worker starts it,
the proxy probes it ready. Goals <= 1 s process, <= 2 s Podman (Knative hello-world:
2-4 s).

**Scale-up step** (``--step``, rootless Podman): one replica at its target concurrency
(2 clients, 100 ms requests), then 8x the clients at once; seconds until 8 replicas are
ready, and requests failed meanwhile (goal <= 10 s, none). **Rolling update** (``--roll``,
rootless Podman): two replicas under 4 clients, then a new revision; seconds until every
replica runs it, and requests failed (goal none).

Helpers (wrk and nginx on first use, process handling, Redis, medians) come from
benchmarks/proxy.py. Progress goes to stderr; the last line of stdout is one JSON object.

    .venv/bin/python benchmarks/endpoints.py --duration 5 --rounds 3 --replicas 2
    JOBGATE_PODMAN_SOCKET=unix:///run/user/1001/podman/podman.sock \\
        .venv/bin/python benchmarks/endpoints.py --no-overhead --cold-rounds 3 --step --roll
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx

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
        port, pid = bench.start_appproxy(procs, redis_url, args)
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


# ---- cold start: jobgate up (process runtime), an endpoint at zero, the first request ----
class Stack:
    """``jobgate up --runtime process`` in a temporary directory on free ports."""

    def __init__(self, root: Path, runtime: str = "process") -> None:
        self.root = root
        self.runtime = runtime
        self.port, self.proxy_port = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.api: httpx.Client | None = None

    def __enter__(self) -> Stack:
        data = self.root / "data"
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
        if "JOBGATE_PODMAN_SOCKET" in os.environ:
            env["JOBGATE_PODMAN_SOCKET"] = os.environ["JOBGATE_PODMAN_SOCKET"]
        argv = [sys.executable, "-m", "jobgate", "up", "--data-dir", str(data), "--runtime"]
        argv += [self.runtime, "--port", str(self.port), "--proxy-port", str(self.proxy_port)]
        log_path = self.root / "up.log"
        with log_path.open("wb") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while "ready." not in log_path.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("jobgate up did not start:\n" + log_path.read_text()[-2000:])
            time.sleep(0.2)
        key = (data / "admin.key").read_text().strip()
        self.api = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.api is not None:
            self.api.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # the process this script started, nothing else
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _status(api: httpx.Client, name: str) -> dict[str, Any]:
    answer: dict[str, Any] = api.get(f"/v1/endpoints/{name}").raise_for_status().json()
    return answer


def _until(check: Any, what: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.1)


def cold_start(args: argparse.Namespace, runtime: str = "process") -> dict[str, Any]:
    """From zero replicas to the first answer through the endpoint URL."""
    root = Path(tempfile.mkdtemp(prefix="jobgate-bench-cold-"))
    seconds: list[float] = []
    try:
        with Stack(root, runtime=runtime) as stack:
            assert stack.api is not None
            api = stack.api
            autoscale = {
                "min_replicas": 0,
                "max_replicas": 1,
                "target_concurrency": 8,
                "idle_to_zero_s": 1,
                "scale_down_delay_s": 0,
            }
            body: dict[str, Any] = {"name": "cold", "probe": {"path": "/ping"}}
            body["autoscale"] = autoscale
            port = free_port()
            if runtime == "podman":  # the cached test image, its port published by Podman
                body |= {"image": "localhost/jobgate-httpbench:latest", "port": 8000}
            else:  # the same server as a plain process on a free host port
                server = [sys.executable, str(ROOT / "scripts" / "httpbench.py")]
                server += ["--host", "127.0.0.1", "--port", str(port)]
                body |= {"command": server, "port": port}
            api.post("/v1/endpoints", json=body).raise_for_status()
            token = api.post("/v1/endpoints/cold/tokens", json={}).raise_for_status().json()
            url = f"http://127.0.0.1:{stack.proxy_port}/e/cold/ping"
            headers = {"Authorization": f"Bearer {token['token']}"}
            for number in range(1, args.cold_rounds + 1):
                _until(
                    lambda: (
                        _status(api, "cold")["status"] == "SCALED_TO_ZERO"
                        and (runtime == "podman" or not _port_open(port))
                    ),
                    "the endpoint at zero",
                )
                started = time.perf_counter()
                answer = httpx.get(url, headers=headers, timeout=120)
                took = time.perf_counter() - started
                if answer.status_code != 200:
                    raise RuntimeError(
                        f"cold request answered {answer.status_code} after {took:.1f} s: "
                        f"{answer.text[:300]}; endpoint: {_status(api, 'cold')}"
                    )
                seconds.append(took)
                bench.log(f"cold start {number}: {took:.3f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ordered = sorted(seconds)
    goal = 2.0 if runtime == "podman" else 1.0
    return {
        "runtime": runtime,
        "rounds": len(seconds),
        "median_s": round(statistics.median(ordered), 3),
        "max_s": round(ordered[-1], 3),
        "goal_s": goal,
        "goal_met": statistics.median(ordered) <= goal,
    }


class Load:
    """``clients`` threads, each sending one request after another (a 100 ms model)."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.ok = 0
        self.failed: list[str] = []
        self._stops: list[threading.Event] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def grow(self, clients: int) -> None:
        while len(self._threads) < clients:
            stop = threading.Event()
            thread = threading.Thread(target=self._run, args=(stop,), daemon=True)
            thread.start()
            self._stops.append(stop)
            self._threads.append(thread)

    def close(self) -> None:
        for stop in self._stops:
            stop.set()
        for thread in self._threads:
            thread.join(60)

    def _run(self, stop: threading.Event) -> None:
        with httpx.Client(headers=self.headers, timeout=120) as client:
            while not stop.is_set():
                try:
                    answer = client.post(self.url + "?delay_ms=100", content=b"{}")
                    failure = "" if answer.status_code == 200 else f"HTTP {answer.status_code}"
                except httpx.HTTPError as exc:
                    failure = type(exc).__name__
                with self._lock:
                    if failure:
                        self.failed.append(failure)
                    else:
                        self.ok += 1


def scale_up_step(args: argparse.Namespace) -> dict[str, Any]:
    """Rootless Podman: 1 replica at its target concurrency, then 8x the load at once;
    seconds until the ready replicas meet the target, and requests failed meanwhile."""
    if not os.environ.get("JOBGATE_PODMAN_SOCKET"):
        return {"not_measured": "set JOBGATE_PODMAN_SOCKET (rootless Podman) for the step"}
    target, step = 2, 8
    root = Path(tempfile.mkdtemp(prefix="jobgate-bench-step-"))
    try:
        with Stack(root, runtime="podman") as stack:
            assert stack.api is not None
            api = stack.api
            body = {
                "name": "step",
                "image": "localhost/jobgate-httpbench:latest",
                "port": 8000,
                "resources": {"cpu": "0.1", "mem": "128m"},
                "probe": {"path": "/ping", "interval_s": 1.0},
                "autoscale": {
                    "min_replicas": 1,
                    "max_replicas": step,
                    "target_concurrency": target,
                },
            }
            api.post("/v1/endpoints", json=body).raise_for_status()
            token = api.post("/v1/endpoints/step/tokens", json={}).raise_for_status().json()
            _until(lambda: _status(api, "step")["ready_replicas"] >= 1, "one ready replica")
            load = Load(f"http://127.0.0.1:{stack.proxy_port}/e/step/invocations", token["token"])
            try:
                load.grow(target)
                time.sleep(5.0)  # settled at one replica
                load.grow(target * step)
                started = time.perf_counter()
                _until(
                    lambda: _status(api, "step")["ready_replicas"] >= step,
                    "the replicas for 8x the load",
                    timeout=180,
                )
                took = time.perf_counter() - started
                time.sleep(2.0)
            finally:
                load.close()
            bench.log(f"scale-up step: {took:.1f} s, {load.ok} ok, {len(load.failed)} failed")
            return {
                "runtime": "podman",
                "target_concurrency": target,
                "replicas": step,
                "seconds_to_target": round(took, 2),
                "requests_ok": load.ok,
                "requests_failed": len(load.failed),
                "failures": sorted(set(load.failed))[:5],
                "goal_le_10s_and_no_failures": took <= 10 and not load.failed,
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def rolling_update(args: argparse.Namespace) -> dict[str, Any]:
    """Rootless Podman: 2 replicas under steady load (4 clients), then a new revision;
    seconds until every replica runs it and the endpoint is HEALTHY, and failed requests."""
    if not os.environ.get("JOBGATE_PODMAN_SOCKET"):
        return {"not_measured": "set JOBGATE_PODMAN_SOCKET (rootless Podman) for the update"}
    root = Path(tempfile.mkdtemp(prefix="jobgate-bench-roll-"))
    try:
        with Stack(root, runtime="podman") as stack:
            assert stack.api is not None
            api = stack.api
            body = {
                "name": "roll",
                "image": "localhost/jobgate-httpbench:latest",
                "port": 8000,
                "resources": {"cpu": "0.1", "mem": "128m"},
                "env": {"MODEL_VERSION": "1"},
                "probe": {"path": "/ping", "interval_s": 1.0},
                "autoscale": {"min_replicas": 2, "max_replicas": 2},
            }
            api.post("/v1/endpoints", json=body).raise_for_status()
            token = api.post("/v1/endpoints/roll/tokens", json={}).raise_for_status().json()
            _until(lambda: _status(api, "roll")["status"] == "HEALTHY", "two ready replicas")
            load = Load(f"http://127.0.0.1:{stack.proxy_port}/e/roll/invocations", token["token"])
            try:
                load.grow(4)
                time.sleep(3.0)
                started = time.perf_counter()
                update = {"env": {"MODEL_VERSION": "2"}}
                api.post("/v1/endpoints/roll/revisions", json=update).raise_for_status()

                def rolled() -> bool:
                    e = _status(api, "roll")
                    return (
                        e["revision"] == 2
                        and e["status"] == "HEALTHY"
                        and all(r["revision"] == 2 for r in e["replicas"])
                    )

                _until(rolled, "revision 2 everywhere", timeout=300)
                took = time.perf_counter() - started
                time.sleep(2.0)
            finally:
                load.close()
            bench.log(f"rolling update: {took:.1f} s, {load.ok} ok, {len(load.failed)} failed")
            return {
                "runtime": "podman",
                "replicas": 2,
                "seconds": round(took, 2),
                "requests_ok": load.ok,
                "requests_failed": len(load.failed),
                "failures": sorted(set(load.failed))[:5],
                "goal_no_failures": not load.failed,
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


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
    parser.add_argument("--cold-rounds", type=int, default=3, help="cold starts (0: none)")
    parser.add_argument("--no-overhead", action="store_true", help="skip the wrk part")
    parser.add_argument(
        "--step", action="store_true", help="the 8x scale-up step (rootless Podman)"
    )
    parser.add_argument(
        "--roll", action="store_true", help="a rolling update under load (rootless Podman)"
    )
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="proxies on CPU 0, load generator and replicas on the others",
    )
    return bench.split_cpus(parser, parser.parse_args())


def main() -> None:
    args = parse_args()
    result = {
        "cpu_count": os.cpu_count(),
        "workers": args.workers,
        "duration_s": args.duration,
        "rounds": args.rounds,
        "wrk": {"threads": args.wrk_threads, "connections": args.connections},
        "isolated": args.isolate,
        "overhead": {"not_measured": "--no-overhead"} if args.no_overhead else overhead(args),
        "cold_start": cold_start(args) if args.cold_rounds else {"not_measured": "--cold-rounds 0"},
        "cold_start_podman": (
            cold_start(args, "podman")
            if args.cold_rounds and os.environ.get("JOBGATE_PODMAN_SOCKET")
            else {"not_measured": "set JOBGATE_PODMAN_SOCKET (rootless Podman)"}
        ),
        "scale_up_step": scale_up_step(args) if args.step else {"not_measured": "no --step"},
        "rolling_update": rolling_update(args) if args.roll else {"not_measured": "no --roll"},
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
