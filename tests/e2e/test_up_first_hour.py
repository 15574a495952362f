"""The first hour with jobgate, end to end through the CLI: what `jobgate up` prints runs,
two stacks on one host keep apart, a taken port is one clear line, the multi-node
commands say what they miss in one line, and a request no node could ever run is
refused when it is submitted instead of waiting forever.
"""

from __future__ import annotations

import http.server
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tomli_w
from up_harness import UpStack, processes_of

from jobgate.localnet import free_port

GPUS = {
    "devices": [{"kind": "cuda", "model": "Mock GPU 8GB", "memory": "8GiB"}],
    "cuda": {"mode": "fractional", "shares_per_device": 2, "quantum": 0.1},
}


def refused(result: subprocess.CompletedProcess[str], *words: str) -> None:
    """A refusal through the CLI: exit 1, one clear message naming the field, no traceback."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    for word in words:
        assert word in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def containers(socket: str, session_id: str) -> list[dict[str, Any]]:
    path = socket.removeprefix("unix://")
    with httpx.Client(transport=httpx.HTTPTransport(uds=path), timeout=10) as client:
        rows: list[dict[str, Any]] = client.get(
            "http://podman/v4.0.0/libpod/containers/json",
            params={"all": "true", "filters": f'{{"label": ["jobgate.session={session_id}"]}}'},
        ).json()
    return rows


@pytest.fixture
def two_podman_stacks(tmp_path: Path, podman_socket: str) -> Iterator[tuple[UpStack, UpStack]]:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = UpStack(tmp_path / "a", runtime="podman")
    b = UpStack(tmp_path / "b", runtime="podman")
    try:
        yield a, b
    finally:
        b.close()
        a.close()


@pytest.mark.timeout(420)  # two whole stacks, one after the other
def test_podman_up_runs_what_it_prints_and_two_stacks_keep_their_own_containers(
    two_podman_stacks: tuple[UpStack, UpStack], podman_socket: str
) -> None:
    a, b = two_podman_stacks
    text = a.start()
    assert "image      localhost/jobgate-python:3.11 (default" in text
    printed = text.split("In another shell: ", 1)[1].splitlines()[0]
    argv = shlex.split(printed)
    assert argv[0] == "jobgate"
    ran = a.cli(*argv[1:])  # exactly the command `jobgate up` tells a person to run
    assert (ran.returncode, ran.stdout) == (0, "42\n"), ran.stderr

    # never placed, never waits: refused with the largest node named
    refused(a.cli("run", "--cpu", "100000", "--", "true"), "resources.cpu", "the largest has")
    refused(a.cli("run", "-r", "cuda.device=1", "--", "true"), "cuda.device", "no node")

    kept = a.cli("run", "--detach", "--", "sleep", "300", check=True).stdout.strip()
    a.wait_status(kept, {"RUNNING"})
    b.start()  # same host, same Podman user, another data dir and other ports
    other = b.cli("run", "--detach", "--", "sleep", "300", check=True).stdout.strip()
    b.wait_status(other, {"RUNNING"})
    (node_a,) = a.cli_json("nodes", "ls")
    (node_b,) = b.cli_json("nodes", "ls")
    assert node_a["id"] != node_b["id"]
    assert node_a["images"] == "required"  # what the gateway's submit check goes by
    (container_a,) = containers(podman_socket, kept)
    (container_b,) = containers(podman_socket, other)
    assert container_a["Labels"]["jobgate.node"] == node_a["id"]
    assert container_a["Labels"]["jobgate.instance"] != container_b["Labels"]["jobgate.instance"]

    assert b.stop() == 0  # b stops its own sessions with it, and only its own
    time.sleep(1.0)  # give a wrongly adopted container the time to be stopped
    assert a.cli_json("sessions", "show", kept)["status"] == "RUNNING"
    (still,) = containers(podman_socket, kept)
    assert still["State"] == "running"
    assert containers(podman_socket, other) == []  # b removed what it ran
    a.cli("sessions", "rm", kept, check=True)
    ended = a.wait_status(kept, {"TERMINATED"})
    assert ended["exit_code"] == 143
    assert "out of memory" not in (ended["status_reason"] or "")


def test_unrunnable_requests_are_refused_at_submit_on_the_process_runtime(
    tmp_path: Path,
) -> None:
    gpus = tmp_path / "gpus.toml"
    gpus.write_text(tomli_w.dumps(GPUS))
    up = UpStack(tmp_path, env={"JOBGATE_MOCK_DEVICES": str(gpus)})
    up.start()
    try:
        refused(
            up.cli("run", "--image", "localhost/jobgate-python:3.11", "--", "python3", "-V"),
            "image",
            "cannot use an image",
        )
        refused(up.cli("run", "--cpu", "100000", "--", "true"), "resources.cpu", "largest")
        refused(up.cli("run", "-r", "cuda.shares=0.15", "--", "true"), "quantum (0.1)")
        refused(up.cli("run", "-r", "cuda.shares=3", "--", "true"), "the largest has 2")
        assert up.cli_json("sessions", "ls") == []  # nothing half-written
        fits = up.cli("run", "-r", "cuda.shares=0.5", "--", "sh", "-c", "echo fits")
        assert (fits.returncode, fits.stdout) == (0, "fits\n"), fits.stderr
    finally:
        up.close()
    image_on_process = up.cli(
        "up", "--runtime", "process", "--image", "x", "--data-dir", str(tmp_path / "other"),
        "--port", str(free_port()), "--proxy-port", str(free_port()),
    )  # fmt: skip
    assert image_on_process.returncode == 1
    assert "--image needs the podman runtime" in image_on_process.stderr


class _Impostor(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_up_refuses_a_port_another_server_answers_on(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Impostor)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    up = UpStack(tmp_path, port=port)
    try:
        started = time.monotonic()
        result = up.cli(
            "up", "--data-dir", str(up.data_dir), "--port", str(port),
            "--proxy-port", str(up.proxy_port), timeout=60,
        )  # fmt: skip
        assert time.monotonic() - started < 60
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use; use --port" in result.stderr
    assert "ready" not in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert processes_of(up.data_dir) == []  # what it started, it stopped


def _bare_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    return env | {"JOBGATE_DATA_DIR": str(tmp_path), "NO_COLOR": "1"} | extra


def _first_line(argv: list[str], env: dict[str, str], timeout: float = 30.0) -> str:
    """Start a long-running component, read the line it prints first, stop it."""
    with subprocess.Popen(
        [sys.executable, "-m", "jobgate", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            return proc.stdout.readline()
        finally:
            timer.cancel()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _one_line_failure(argv: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "jobgate", *argv], env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_multi_node_components_say_in_one_line_what_they_miss_and_what_they_use(
    tmp_path: Path,
) -> None:
    env = _bare_env(tmp_path)
    line = _one_line_failure(["proxy", "serve"], env)
    assert line.startswith("jobgate proxy: JOBGATE_PROXY_SECRET is not set")
    line = _one_line_failure(["worker", "run", "--runtime", "process"], env)
    assert line.startswith("jobgate worker: JOBGATE_JOIN_TOKEN is not set")
    line = _one_line_failure(["gateway", "serve"], env)
    assert line.startswith("jobgate gateway: JOBGATE_JOIN_TOKEN is not set")
    nowhere = "unix:///nonexistent/podman.sock"
    line = _one_line_failure(
        ["worker", "run", "--runtime", "podman"],
        env | {"JOBGATE_NODE_TOKEN": "t", "JOBGATE_PODMAN_SOCKET": nowhere},
    )
    assert f"no Podman API answers at {nowhere}" in line
    assert "JOBGATE_PODMAN_SOCKET" in line

    secrets = {"JOBGATE_NODE_TOKEN": "t" * 20, "JOBGATE_PROXY_SECRET": "s" * 20}
    redis = "redis://:hunter2@127.0.0.1:1/0"
    port = free_port()
    line = _first_line(
        ["gateway", "serve", "--port", str(port)], env | secrets | {"JOBGATE_REDIS_URL": redis}
    )
    assert line.startswith(f"jobgate gateway: listening on http://127.0.0.1:{port}, database ")
    assert f"sqlite+aiosqlite:///{tmp_path}/jobgate.db" in line
    assert "redis redis://:***@127.0.0.1:1/0" in line
    database = "postgresql://jobgate:hunter2@127.0.0.1:1/jobgate"
    line = _first_line(
        ["scheduler", "run"], env | {"JOBGATE_DATABASE_URL": database, "JOBGATE_REDIS_URL": redis}
    )
    assert line.startswith("jobgate scheduler: database postgresql+asyncpg://jobgate:***@")
    assert "hunter2" not in line
