"""``jobgate up`` and the ``jobgate`` CLI as a user runs them: real processes, real ports.

Each stack gets its own data directory, free ports and client profile
(``JOBGATE_CONFIG``), so tests never touch a developer's own stack or profile.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobgate.localnet import free_port as _free_port

__all__ = ["UpStack", "port_open", "processes_of"]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def processes_of(data_dir: Path) -> list[str]:
    """Processes whose environment names *data_dir* (every component `up` starts does)."""
    marker = f"JOBGATE_DATA_DIR={data_dir}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


@dataclass
class UpStack:
    tmp: Path
    runtime: str = "process"
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=_free_port)
    proxy_port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.tmp / "data"

    @property
    def config(self) -> Path:
        return self.tmp / "config.toml"

    @property
    def log_path(self) -> Path:
        return self.tmp / "up.log"

    def environ(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
        keep = {k: v for k, v in os.environ.items() if k == "JOBGATE_PODMAN_SOCKET"}
        return base | keep | {"JOBGATE_CONFIG": str(self.config), "NO_COLOR": "1"} | self.env

    def start(self, timeout: float = 90.0) -> str:
        """Start `jobgate up` and wait until it says it is ready; return its output."""
        argv = [
            sys.executable,
            "-m",
            "jobgate",
            "up",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            "--proxy-port",
            str(self.proxy_port),
            "--runtime",
            self.runtime,
        ]
        already = len(self.output())
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                argv, env=self.environ(), stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.output()[already:]
            if "\nAPI: " in text:
                return text
            if self.proc.poll() is not None:
                raise AssertionError(f"jobgate up exited {self.proc.returncode}:\n{text}")
            time.sleep(0.1)
        raise AssertionError(f"jobgate up was not ready in {timeout}s:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 60.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def cli(
        self,
        *args: str,
        timeout: float = 120.0,
        check: bool = False,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "jobgate", *args],
            env=self.environ() | (env or {}),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"jobgate {' '.join(args)} -> {result.returncode}\n{result.stderr}"
            )
        return result

    def cli_json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "--output", "json", check=True).stdout)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "jobgate", *args],
            env=self.environ(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_status(
        self, session: str, statuses: set[str], timeout: float = 60.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        shown: dict[str, Any] = {}
        while time.monotonic() < deadline:
            shown = self.cli_json("sessions", "show", session)
            if shown["status"] in statuses:
                return shown
            time.sleep(0.2)
        raise AssertionError(f"{session} is {shown.get('status')}, wanted {statuses}")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
