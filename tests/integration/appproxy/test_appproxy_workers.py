"""`JOBGATE_PROXY_WORKERS=N`: N proxy processes answer on one port; SIGTERM stops them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from harness import free_port
from up_harness import port_open
from waiting import until_sync


def _children(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = next(int(line.split()[1]) for line in status.splitlines() if line[:5] == "PPid:")
        if ppid == pid and b"multiprocessing.spawn" in cmdline:
            found.append(int(proc.name))
    return found


def test_several_proxy_processes_share_one_port(redis_url: str) -> None:
    port = free_port()
    env = os.environ | {
        "JOBGATE_REDIS_URL": redis_url,
        "JOBGATE_PROXY_SECRET": "a-secret-of-sixteen-chars",
        "JOBGATE_PROXY_WORKERS": "2",
    }
    proxy = subprocess.Popen(
        [sys.executable, "-m", "jobgate", "proxy", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def serving() -> bool:
            assert proxy.poll() is None, "the proxy exited"
            return len(_children(proxy.pid)) >= 2 and port_open(port)

        until_sync(serving, timeout=60, interval=0.1, what="two proxy workers started")
        workers = _children(proxy.pid)
        assert len(workers) == 2
        for _ in range(20):  # a new connection each time: any worker may take it
            assert httpx.get(f"http://127.0.0.1:{port}/_jobgate/healthz").status_code == 200
        proxy.send_signal(signal.SIGTERM)
        assert proxy.wait(30) == 0
        assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
        assert not port_open(port)
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
