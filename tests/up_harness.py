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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from waiting import until_sync

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
        proc = self.proc

        def ready() -> str | None:
            text = self.output()[already:]
            if "\nAPI: " in text:
                return text
            assert proc.poll() is None, f"jobgate up exited {proc.returncode}:\n{text}"
            return None

        return until_sync(
            ready, timeout=timeout, interval=0.1, what=lambda: f"jobgate up ready:\n{self.output()}"
        )

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
        """The command as a terminal starts it: Ctrl-C (SIGINT) reaches it as
        KeyboardInterrupt even when this test process inherited SIGINT ignored (a shell's
        background job, `nohup`), which Python would otherwise pass on to the command."""
        return subprocess.Popen(
            [sys.executable, "-c", _AS_FROM_A_TERMINAL, *args],
            env=self.environ(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_status(
        self, session: str, statuses: set[str], timeout: float = 60.0
    ) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def reached() -> dict[str, Any] | None:
            seen.update(self.cli_json("sessions", "show", session))
            return seen if seen["status"] in statuses else None

        return until_sync(
            reached,
            timeout=timeout,
            interval=0.2,
            what=lambda: f"{session} is {seen.get('status')}, wanted {statuses}",
        )

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


#: ``python -m jobgate ARGS`` with SIGINT raising KeyboardInterrupt, as in a terminal
_AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys; "
    "signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'jobgate'; "
    "runpy.run_module('jobgate', run_name='__main__', alter_sys=True)"
)
