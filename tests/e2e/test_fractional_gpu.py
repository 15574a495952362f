"""The fractional-GPU scenarios of the accelerator issue, end to end through the CLI.

Each scenario runs against ``jobgate up`` started as a user starts it - a subprocess
with its own data directory, free ports, the ``process`` runtime and mock GPUs from
``JOBGATE_MOCK_DEVICES`` - and is driven only with the ``jobgate`` command, as a user
drives it (``run``, ``sessions ls/show/logs/rm`` with ``-o json`` where the test reads
fields). ``jobgate up`` allows unenforced fractions itself when mock devices are set.

=====  ===================================  =========================================
#      node (8 GiB mock GPUs)               checked
=====  ===================================  =========================================
1      one GPU, 2 shares each (1 fGPU =     0.5 shares run and see 2 GiB,
       half a GPU)                          ``JOBGATE_CUDA_SHARES=0.5``, the device
2      2 fGPU: one GPU x 2 shares, or two   three sessions of 1: two run, one waits
       GPUs x 1 share                       with the largest free fraction named;
                                            terminating one lets it run
3      1 fGPU: one GPU x 1 share            three sessions of 0.4: two run, one waits;
                                            terminating one lets it run
=====  ===================================  =========================================

"Within 2 s" is not asserted here (tests assert behaviour, not timing): the latency
from terminating a session to the waiting one running is measured by
``benchmarks/fgpu_requeue.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import tomli_w
from up_harness import UpStack
from waiting import until_sync

T = TypeVar("T")
GiB = 1024**3
TERMINAL = {"SUCCEEDED", "FAILED", "TERMINATED", "CANCELLED", "ERROR"}
SHOW_LIMIT = "echo JOBGATE_CUDA_MEMORY_BYTES=$JOBGATE_CUDA_MEMORY_BYTES; exec sleep 600"

#: mock device files, by name: what `jobgate up` is started with
NODES: dict[str, dict[str, Any]] = {
    "one-gpu-two-shares": {
        "devices": [{"kind": "cuda", "model": "Mock GPU 8GB", "memory": "8GiB"}],
        "cuda": {"mode": "fractional", "shares_per_device": 2, "quantum": 0.1},
    },
    "two-gpus-one-share": {
        "devices": [{"kind": "cuda", "model": "Mock GPU 8GB", "memory": "8GiB", "count": 2}],
        "cuda": {"mode": "fractional", "shares_per_device": 1, "quantum": 0.1},
    },
    "one-gpu-one-share": {
        "devices": [{"kind": "cuda", "model": "Mock GPU 8GB", "memory": "8GiB"}],
        "cuda": {"mode": "fractional", "shares_per_device": 1, "quantum": 0.1},
    },
}


@dataclass
class Up(UpStack):
    """``jobgate up`` on mock GPUs (tests/up_harness.py), with the scenarios' CLI steps."""

    mine: list[str] = field(default_factory=list)  # sessions this test created

    @classmethod
    def on(cls, tmp: Path, devices: dict[str, Any]) -> Up:
        mock = tmp / "mock-devices.toml"
        mock.write_text(tomli_w.dumps(devices))
        env = {
            "JOBGATE_MOCK_DEVICES": str(mock),
            # only the mock plugin: on a machine with real GPUs `auto` would add them
            "JOBGATE_ACCELERATORS": "mock",
            "COLUMNS": "200",
        }
        up = cls(tmp, env=env)
        up.start(timeout=120)
        return up

    def ok(self, *args: str) -> str:
        return self.cli(*args, check=True).stdout

    def submit(self, shares: str, command: str = SHOW_LIMIT) -> str:
        """``jobgate run -d -r cuda.shares=SHARES``; the new session's name."""
        name = f"fgpu-{uuid.uuid4().hex[:8]}"
        self.ok(
            "run", "-d", "--name", name, "-r", f"cuda.shares={shares}", "--", "sh", "-c", command
        )
        self.mine.append(name)
        return name

    def show(self, name: str) -> dict[str, Any]:
        session: dict[str, Any] = self.cli_json("sessions", "show", name)
        return session

    def session_output(self, name: str) -> str:
        """``jobgate sessions logs NAME`` once the session printed its line."""
        return until_sync(
            lambda: self.ok("sessions", "logs", name) or None,
            timeout=60,
            interval=0.2,
            what=f"output of {name}",
        )

    def statuses(self, names: list[str]) -> dict[str, dict[str, Any]]:
        by_name = {s["name"]: s for s in self.cli_json("sessions", "ls")}
        return {n: by_name[n] for n in names}

    def clean(self) -> None:
        live = [n for n, s in self.statuses(self.mine).items() if s["status"] not in TERMINAL]
        if live:
            self.ok("sessions", "rm", "--force", *live)

        def ended() -> bool | None:
            now = self.statuses(live)
            return all(s["status"] in TERMINAL for s in now.values()) or None

        until_sync(ended, timeout=60, interval=0.2, what=f"{', '.join(live)} to end")
        self.mine.clear()


@pytest.fixture(scope="module")
def ups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Up]]:
    """``jobgate up`` per mock node layout, started on first use, shared by the module."""
    started: dict[str, Up] = {}

    def get(layout: str) -> Up:
        if layout not in started:
            started[layout] = Up.on(tmp_path_factory.mktemp(layout), NODES[layout])
        return started[layout]

    try:
        yield get
    finally:
        for up in started.values():
            up.close()


@pytest.fixture
def up_for(ups: Callable[[str], Up]) -> Iterator[Callable[[str], Up]]:
    """Like ``ups``, and stops what the test left running so the next one starts empty."""
    used: list[Up] = []

    def get(layout: str) -> Up:
        up = ups(layout)
        used.append(up)
        return up

    try:
        yield get
    finally:
        for up in used:
            up.clean()


def devices(session: dict[str, Any]) -> dict[str, str]:
    (kernel,) = session["kernels"]
    per_device: dict[str, str] = kernel["devices"]["cuda.shares"]
    return per_device


def two_run_one_waits(up: Up, names: list[str]) -> tuple[list[str], str, str]:
    """Wait until two of *names* run and one has a scheduler's reason to wait."""

    def check() -> tuple[list[str], str, str] | None:
        now = up.statuses(names)
        running = [n for n in names if now[n]["status"] == "RUNNING"]
        pending = [n for n in names if now[n]["status"] == "PENDING"]
        reason = (now[pending[0]]["pending_reason"] or "") if len(pending) == 1 else ""
        if len(running) == 2 and "no node fits" in reason:
            return running, pending[0], reason
        return None

    return until_sync(
        check, timeout=60, interval=0.2, what="two sessions running and one waiting with a reason"
    )


# -- scenario 1 ---------------------------------------------------------------------------
def test_half_an_fgpu_runs_and_sees_a_quarter_of_the_gpu(up_for: Callable[[str], Up]) -> None:
    up = up_for("one-gpu-two-shares")
    name = f"fgpu-{uuid.uuid4().hex[:8]}"
    up.mine.append(name)
    done = up.cli(
        "run",
        "--name",
        name,
        "-r",
        "cuda.shares=0.5",
        "--",
        "sh",
        "-c",
        "env | grep -E '^(CUDA|JOBGATE_CUDA)'",
    )
    assert done.returncode == 0, done.stderr
    seen = dict(line.split("=", 1) for line in done.stdout.splitlines())
    assert seen["JOBGATE_CUDA_MEMORY_BYTES"] == str(2 * GiB)  # 0.5 of 2 shares of 8 GiB
    assert seen["JOBGATE_CUDA_SHARES"] == "0.5"
    assert seen["CUDA_VISIBLE_DEVICES"] == "mock-cuda-0"
    session = up.show(name)
    assert (session["status"], session["exit_code"]) == ("SUCCEEDED", 0)
    assert devices(session) == {"mock-cuda-0": "0.5"}


# -- scenario 2 ---------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["one-gpu-two-shares", "two-gpus-one-share"])
def test_two_fgpu_node_runs_two_of_three_and_the_third_when_one_ends(
    up_for: Callable[[str], Up], layout: str
) -> None:
    up = up_for(layout)
    names = [up.submit("1") for _ in range(3)]
    running, waiting, reason = two_run_one_waits(up, names)
    assert waiting == names[2]
    assert "lacks cuda.shares (largest free 0)" in reason
    assert "largest free 0" in up.ok("sessions", "show", waiting)  # what a person reads
    held = {d: a for n in running for d, a in devices(up.show(n)).items()}
    if layout == "two-gpus-one-share":
        assert held == {"mock-cuda-0": "1", "mock-cuda-1": "1"}  # one whole GPU each
    else:
        assert [devices(up.show(n)) for n in running] == [{"mock-cuda-0": "1"}] * 2

    gone = running[0]
    up.ok("sessions", "rm", gone)
    now = up.wait_status(waiting, {"RUNNING"})
    assert devices(now) == devices(up.show(gone))  # it got the share that was freed
    assert up.show(gone)["status"] == "TERMINATED"
    one_fgpu = 4 * GiB if layout == "one-gpu-two-shares" else 8 * GiB
    assert up.session_output(waiting) == f"JOBGATE_CUDA_MEMORY_BYTES={one_fgpu}\n"


# -- scenario 3 ---------------------------------------------------------------------------
def test_one_fgpu_node_runs_two_of_three_0_4_and_the_third_when_one_ends(
    up_for: Callable[[str], Up],
) -> None:
    up = up_for("one-gpu-one-share")
    names = [up.submit("0.4") for _ in range(3)]
    running, waiting, reason = two_run_one_waits(up, names)
    assert waiting == names[2]
    assert "lacks cuda.shares (largest free 0.2)" in reason
    assert [devices(up.show(n)) for n in running] == [{"mock-cuda-0": "0.4"}] * 2
    assert up.session_output(running[0]) == "JOBGATE_CUDA_MEMORY_BYTES=3435973836\n"  # 0.4 x 8 GiB

    up.ok("sessions", "rm", running[1])
    now = up.wait_status(waiting, {"RUNNING"})
    assert devices(now) == {"mock-cuda-0": "0.4"}
    assert up.show(running[0])["status"] == "RUNNING"  # untouched
