"""What several benchmark scripts share: starting ``jobgate up`` and a percentile.

The scripts run as ``python benchmarks/X.py``, so this folder is on ``sys.path`` and they
import it as ``common``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from jobgate.localnet import free_port

T = TypeVar("T")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def jobgate_up(
    root: Path, env: dict[str, str], timeout: float = 120.0
) -> tuple[subprocess.Popen[bytes], int, str]:
    """Start ``jobgate up`` (process runtime, data in *root*/data, free ports) and wait
    until it is ready; *env* is added to this environment less its JOBGATE_* variables.
    Returns the process, the API port and the admin API key; its output is *root*/up.log.
    """
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    environ.update(env)
    data, port = root / "data", free_port()
    argv = [sys.executable, "-m", "jobgate", "up", "--data-dir", str(data), "--port", str(port)]
    argv += ["--proxy-port", str(free_port()), "--runtime", "process"]
    log_path = root / "up.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(argv, env=environ, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while "ready." not in log_path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"jobgate up did not start:\n{log_path.read_text(errors='replace')}")
        time.sleep(0.2)
    return proc, port, (data / "admin.key").read_text().strip()


def log(message: str) -> None:
    """Progress, to stderr (stdout ends with the one JSON line)."""
    print(message, file=sys.stderr, flush=True)


def wait_for(check: Callable[[], T | None], what: str, timeout: float, every: float) -> T:
    """Poll *check* every *every* seconds until it gives something, at most *timeout*."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(every)
