"""App proxy benchmark: small GETs and WebSocket echo, direct vs jobgate vs nginx (vs CHP).

    wrk / asyncio WS client ──▶ direct ────────────────────────────────▶ upstream
                            ──▶ jobgate proxy (cookie auth, routes) ──▶ upstream
                            ──▶ nginx reverse proxy ──────────────────▶ upstream
                            ──▶ configurable-http-proxy (if npm has it) ▶ upstream

One run measures every target against the same upstream (a small raw-ASGI app under
uvicorn with uvloop and httptools) with the same load: ``wrk`` for HTTP (Debian package)
and an asyncio client (``websockets``) that keeps N connections each sending a 64-byte
message and waiting for its echo. jobgate and nginx run the same number of worker
processes (``--workers``, stated in the output). nginx, wrk and configurable-http-proxy
are installed on first use (apt-get / npm into a cache dir) unless ``--no-install``; a
tool that cannot be had is reported as missing and its target skipped.

By default every process shares every CPU, so on a small host the load generators, the
upstream and the proxy compete for the same cores and any extra hop costs throughput.
``--isolate`` gives the proxies CPU 0 and everything else the other CPUs, which is how
a proxy runs in production (on its own host): it then shows whether the proxy itself is
the bottleneck. The output says which mode was used.

Goals: jobgate HTTP req/s >= 50% of nginx's; jobgate WebSocket messages/s >= 80% of
direct. Progress goes to stderr; the last line of stdout is one JSON object.

    .venv/bin/python benchmarks/proxy.py --duration 10 --connections 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from jobgate.localnet import free_port, redis_server_binary, wait_port

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jobgate-bench"
SECRET = "benchmark-secret-0123456789abcdef"
SESSION = "0b5e7c1a-7d43-4cf4-9a51-2f0e3c8d9e11"
BODY = b"Hello, world!"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- the upstream: a small fast ASGI app --------------------------------------------------
async def upstream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/plain"),
                    (b"content-length", str(len(BODY)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": BODY})
    elif scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return
            await send(
                {
                    "type": "websocket.send",
                    "bytes": message.get("bytes"),
                    "text": message.get("text"),
                }
            )


def serve_upstream(port: int) -> None:
    import uvicorn

    uvicorn.run(
        upstream_app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        ws_per_message_deflate=False,
        server_header=False,
        date_header=False,
    )


# ---- tools: locate or install --------------------------------------------------------------
def find_or_install(binary: str, package: str, install: bool) -> str | None:
    found = shutil.which(binary) or next(
        (str(p) for p in (Path("/usr/sbin") / binary, Path("/sbin") / binary) if p.exists()), None
    )
    if found or not install or not shutil.which("apt-get"):
        return found
    log(f"installing {package} (apt-get)...")
    result = subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", package],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        log(f"apt-get install {package} failed: {result.stderr.strip()[-300:]}")
    return shutil.which(binary) or (
        f"/usr/sbin/{binary}" if Path(f"/usr/sbin/{binary}").exists() else None
    )


def find_chp(install: bool) -> str | None:
    script = CACHE / "npm" / "node_modules" / ".bin" / "configurable-http-proxy"
    if script.exists() or not install:
        return str(script) if script.exists() else shutil.which("configurable-http-proxy")
    if not shutil.which("npm"):
        log("npm not found: configurable-http-proxy skipped")
        return None
    log("installing configurable-http-proxy (npm, into the cache dir)...")
    (CACHE / "npm").mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [
            "npm",
            "install",
            "--no-audit",
            "--no-fund",
            "--prefix",
            str(CACHE / "npm"),
            "configurable-http-proxy",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        log(f"npm install configurable-http-proxy failed: {result.stderr.strip()[-300:]}")
        return None
    return str(script) if script.exists() else None


# ---- the proxies under test -----------------------------------------------------------------
NGINX_CONF = """
worker_processes {workers};
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    map $http_upgrade $connection_upgrade {{ default upgrade; '' ''; }}
    upstream app {{ server 127.0.0.1:{upstream}; keepalive 128; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_buffering off;
            proxy_read_timeout 3600s;
        }}
    }}
}}
"""


def pinned(cpus: set[int] | None) -> Any:
    """A ``preexec_fn`` that keeps a child (and what it forks) on ``cpus``; None: anywhere."""
    if not cpus:
        return None
    return partial(os.sched_setaffinity, 0, cpus)


class Processes:
    """Child processes started here, stopped (only these) at the end; logs in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.children: list[subprocess.Popen[bytes]] = []

    def start(
        self, argv: list[str], env: dict[str, str] | None = None, cpus: set[int] | None = None
    ) -> int:
        logfile = self.workdir / f"child-{len(self.children)}.log"
        with logfile.open("wb") as sink:
            child = subprocess.Popen(
                argv,
                env={**os.environ, **(env or {})},
                stdout=sink,
                stderr=sink,
                preexec_fn=pinned(cpus),
            )
        self.children.append(child)
        return child.pid

    def stop(self) -> None:
        for child in self.children:
            child.terminate()
        for child in self.children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def start_redis(procs: Processes, workdir: Path) -> str:
    port = free_port()
    procs.start(
        [
            redis_server_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ]
    )
    wait_port(port)
    return f"redis://127.0.0.1:{port}/0"


def start_appproxy(procs: Processes, redis_url: str, args: argparse.Namespace) -> tuple[int, int]:
    """Start jobgate's app proxy (``args.workers`` workers on ``args.proxy_cpus``): port, pid."""
    port = free_port()
    pid = procs.start(
        [sys.executable, "-c", "from appproxy.server import serve; serve()"],
        env={
            "JOBGATE_PROXY_SECRET": SECRET,
            "JOBGATE_REDIS_URL": redis_url,
            "JOBGATE_PROXY_PORT": str(port),
            "JOBGATE_PROXY_WORKERS": str(args.workers),
            "JOBGATE_GATEWAY_URL": "http://127.0.0.1:9",
            "PYTHONPATH": str(ROOT),
        },
        cpus=args.proxy_cpus,
    )
    wait_port(port)
    return port, pid


def jobgate_route_and_cookie(redis_url: str, upstream: str) -> str:
    from redis.asyncio import Redis

    from contract.routes import AppRoute, RouteRecord, write_route
    from contract.tokens import issue_cookie

    async def write() -> None:
        redis = Redis.from_url(redis_url)
        try:
            await write_route(
                redis,
                RouteRecord(
                    session_id=SESSION,
                    owner_id="bench-user",
                    apps={"echo": AppRoute(upstream=upstream, strip_prefix=True)},
                ),
            )
        finally:
            await redis.aclose()

    asyncio.run(write())
    value = issue_cookie(SECRET, SESSION, "bench-user", admin=False, lifetime=86_400)
    return f"jobgate_auth={value}"


# ---- load generators ----------------------------------------------------------------------------
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text)
    if not match:
        raise ValueError(f"unreadable wrk latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def run_wrk(
    wrk: str,
    url: str,
    args: argparse.Namespace,
    cookie: str | None,
    headers: tuple[str, ...] = (),
) -> dict[str, Any]:
    """wrk's req/s and p50/p99; ``headers`` ("Name: value") go with every request."""
    argv = [
        wrk,
        "-t",
        str(args.wrk_threads),
        "-c",
        str(args.connections),
        "-d",
        f"{args.duration}s",
        "--latency",
        url,
    ]
    if cookie:
        headers = (*headers, f"Cookie: {cookie}")
    for header in headers:
        argv[1:1] = ["-H", header]
    out = subprocess.run(
        argv, capture_output=True, text=True, check=True, preexec_fn=pinned(args.load_cpus)
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))  # type: ignore[union-attr]
    pct = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.MULTILINE))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return {
        "_seconds": args.duration,
        "req_per_s": round(rps, 1),
        "p50_ms": round(_seconds(pct["50"]) * 1000, 3),
        "p99_ms": round(_seconds(pct["99"]) * 1000, 3),
        "non_2xx": int(errors.group(1)) if errors else 0,
        "socket_errors": _socket_errors(socket_errors.group(1)) if socket_errors else 0,
    }


def _socket_errors(text: str) -> int:
    """wrk's "connect 0, read 0, write 0, timeout 7" as one number."""
    return sum(int(n) for n in re.findall(r"\d+", text))


async def ws_echo_load(
    url: str, cookie: str | None, connections: int, duration: float
) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    headers = {"Cookie": cookie} if cookie else {}
    payload = b"x" * 64
    latencies: list[float] = []
    deadline = 0.0

    async def one() -> None:
        async with connect(
            url, additional_headers=headers, compression=None, ping_interval=None, max_size=None
        ) as ws:
            await ready.wait()
            own: list[float] = []
            while time.perf_counter() < deadline:
                sent = time.perf_counter()
                await ws.send(payload)
                await ws.recv()
                own.append(time.perf_counter() - sent)
            latencies.extend(own)

    ready = asyncio.Event()
    tasks = [asyncio.create_task(one()) for _ in range(connections)]
    await asyncio.sleep(0.5)  # let every connection open before the clock starts
    started = time.perf_counter()
    deadline = started + duration
    ready.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "_seconds": elapsed,
        "msg_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[max(0, math.ceil(len(ordered) * 0.99) - 1)] * 1000, 3),
    }


def run_ws(url: str, cookie: str | None, args: argparse.Namespace) -> dict[str, Any]:
    try:
        import uvloop

        return uvloop.run(ws_echo_load(url, cookie, args.ws_connections, args.duration))
    except ImportError:
        return asyncio.run(ws_echo_load(url, cookie, args.ws_connections, args.duration))


# ---- orchestration ------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """User+system CPU of a process and all its descendants (nginx and jobgate workers)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        pending.extend(int(c) for c in children)
    return total


@contextmanager
def targets(args: argparse.Namespace, tools: dict[str, str | None]) -> Iterator[dict[str, Any]]:
    """Start upstream, jobgate (and nginx, CHP when present); name -> (URL, cookie, pid)."""
    workdir = Path(tempfile.mkdtemp(prefix="jobgate-bench-"))
    procs = Processes(workdir)
    try:
        python = sys.executable
        up = free_port()
        pid = procs.start([python, __file__, "--serve-upstream", str(up)], cpus=args.load_cpus)
        wait_port(up)
        found: dict[str, Any] = {"direct": (f"http://127.0.0.1:{up}", None, pid)}
        redis_url = start_redis(procs, workdir)
        cookie = jobgate_route_and_cookie(redis_url, f"http://127.0.0.1:{up}")
        port, pid = start_appproxy(procs, redis_url, args)
        found["jobgate"] = (f"http://127.0.0.1:{port}/s/{SESSION}/echo", cookie, pid)
        if tools["nginx"]:
            port = free_port()
            conf = workdir / "nginx.conf"
            conf.write_text(
                NGINX_CONF.format(workers=args.workers, dir=workdir, upstream=up, port=port)
            )
            pid = procs.start(
                [
                    tools["nginx"],
                    "-p",
                    str(workdir),
                    "-c",
                    str(conf),
                    "-e",
                    str(workdir / "error.log"),
                ],
                cpus=args.proxy_cpus,
            )
            wait_port(port)
            found["nginx"] = (f"http://127.0.0.1:{port}", None, pid)
        if tools["chp"]:
            port = free_port()
            pid = procs.start(
                [
                    tools["chp"],
                    "--ip",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--api-ip",
                    "127.0.0.1",
                    "--api-port",
                    str(free_port()),
                    "--default-target",
                    f"http://127.0.0.1:{up}",
                    "--log-level",
                    "error",
                ],
                cpus=args.proxy_cpus,
            )
            wait_port(port)
            found["configurable-http-proxy"] = (f"http://127.0.0.1:{port}", None, pid)
        time.sleep(1.0)  # let the proxies settle (route subscriptions, worker start)
        yield found
    finally:
        procs.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def check(url: str, cookie: str | None) -> None:
    """One request per target before measuring: a refusing target is a broken benchmark."""
    import httpx

    response = httpx.get(url + "/small", headers={"Cookie": cookie} if cookie else {})
    if response.status_code != 200 or response.content != BODY:
        raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:200]}")


def measured(pid: int | None, rate_key: str, run: Any) -> dict[str, Any]:
    """Run one load; add the proxy's own CPU time per request/message (not for direct)."""
    before = cpu_seconds(pid) if pid else 0.0
    result: dict[str, Any] = run()
    if pid:
        count = result[rate_key] * result.pop("_seconds")
        result["proxy_cpu_us_per_op"] = round((cpu_seconds(pid) - before) / count * 1e6, 1)
    else:
        result.pop("_seconds")
    return result


def median_of(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per key, the median over rounds (the machine may be shared: one round can be unlucky)."""
    keys = [k for k in samples[0] if isinstance(samples[0][k], int | float)]
    out: dict[str, Any] = {k: round(statistics.median(s[k] for s in samples), 3) for k in keys}
    out["rounds"] = len(samples)
    return out


def ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, key: str) -> float | None:
    return round(a[key] / b[key], 3) if a and b and b.get(key) else None


def split_cpus(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Set ``args.proxy_cpus`` / ``args.load_cpus``: CPU 0 / the rest with --isolate, else None."""
    args.proxy_cpus = args.load_cpus = None
    if args.isolate:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            parser.error("--isolate needs at least two CPUs")
        args.proxy_cpus, args.load_cpus = {cpus[0]}, set(cpus[1:])
    return args


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per measurement")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="measurements per target, interleaved; medians are reported",
    )
    parser.add_argument("--connections", type=int, default=64, help="wrk connections")
    parser.add_argument("--wrk-threads", type=int, default=1)
    parser.add_argument("--ws-connections", type=int, default=32)
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes for jobgate and for nginx alike"
    )
    parser.add_argument("--no-install", action="store_true", help="do not apt-get / npm install")
    parser.add_argument("--no-chp", action="store_true", help="skip configurable-http-proxy")
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="give the proxies CPU 0 and the load generators and upstream the other CPUs, so "
        "a proxy competes with nobody (as on its own host); without it all share every CPU",
    )
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    return split_cpus(parser, parser.parse_args())


def main() -> None:
    args = parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return
    install = not args.no_install
    if args.load_cpus:
        os.sched_setaffinity(0, args.load_cpus)  # the WebSocket load runs in this process
    tools = {
        "wrk": find_or_install("wrk", "wrk", install),
        "nginx": find_or_install("nginx", "nginx", install),
        "chp": None if args.no_chp else find_chp(install),
    }
    missing = sorted(name for name, path in tools.items() if not path)
    for name in missing:
        log(f"MISSING: {name} - its measurements are skipped")
    http_samples: dict[str, list[dict[str, Any]]] = {}
    ws_samples: dict[str, list[dict[str, Any]]] = {}
    with targets(args, tools) as found:
        for url, cookie, _ in found.values():
            check(url, cookie)
        for number in range(1, args.rounds + 1):
            for name, (url, cookie, pid) in found.items():
                own = pid if name != "direct" else None
                wrk = tools["wrk"]
                if wrk:
                    sample = measured(
                        own, "req_per_s", partial(run_wrk, wrk, url + "/small", args, cookie)
                    )
                    http_samples.setdefault(name, []).append(sample)
                    log(f"round {number} HTTP {name}: {sample}")
                ws_url = url.replace("http://", "ws://") + "/ws"
                sample = measured(own, "msg_per_s", partial(run_ws, ws_url, cookie, args))
                ws_samples.setdefault(name, []).append(sample)
                log(f"round {number} WS   {name}: {sample}")
    http = {name: median_of(samples) for name, samples in http_samples.items()}
    ws = {name: median_of(samples) for name, samples in ws_samples.items()}
    ratios = {
        "http_jobgate_vs_nginx": ratio(http.get("jobgate"), http.get("nginx"), "req_per_s"),
        "http_jobgate_vs_direct": ratio(http.get("jobgate"), http.get("direct"), "req_per_s"),
        "ws_jobgate_vs_direct": ratio(ws.get("jobgate"), ws.get("direct"), "msg_per_s"),
        "ws_jobgate_vs_nginx": ratio(ws.get("jobgate"), ws.get("nginx"), "msg_per_s"),
    }
    print(
        json.dumps(
            {
                "workers": {"jobgate": args.workers, "nginx": args.workers},
                "cpu_count": os.cpu_count(),
                "isolation": (
                    {"proxy_cpus": sorted(args.proxy_cpus), "load_cpus": sorted(args.load_cpus)}
                    if args.isolate
                    else None
                ),
                "duration_s": args.duration,
                "rounds": args.rounds,
                "wrk": {"threads": args.wrk_threads, "connections": args.connections},
                "ws_connections": args.ws_connections,
                "missing": missing,
                "http": http,
                "websocket": ws,
                "ratios": ratios,
                "goals": {
                    "http_jobgate_ge_50pct_nginx": (ratios["http_jobgate_vs_nginx"] or 0) >= 0.5,
                    "ws_jobgate_ge_80pct_direct": (ratios["ws_jobgate_vs_direct"] or 0) >= 0.8,
                },
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
