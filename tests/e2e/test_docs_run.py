"""The docs are true on a fresh machine: every ``console`` block of README.md and
docs/*.md runs against a `jobgate up` (process runtime, and Podman), in file order, and
prints what the docs say it prints. Conventions: ``tests/docs_blocks.py``.

A failure names the block (file:line), the command and its line, its exit code and
what it printed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomli_w
from docs_blocks import Block, console_blocks, script, split_output
from up_harness import UpStack

from gateway.domain.status import TERMINAL

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [block for path in DOCS for block in console_blocks(path)]
#: the devices README's mock-GPU example describes (its `jobgate up` is this stack)
GPUS = {
    "devices": [{"kind": "cuda", "model": "Mock GPU 8GB", "memory": "8GiB"}],
    "cuda": {"mode": "fractional", "shares_per_device": 2},
}


def _stack(tmp: Path, runtime: str) -> Iterator[UpStack]:
    gpus = tmp / "gpus.toml"
    gpus.write_text(tomli_w.dumps(GPUS))
    env = {
        "JOBGATE_MOCK_DEVICES": str(gpus),
        "JOBGATE_PODMAN_HOST_LOOPBACK": "true",  # the README's MLflow example says so
    }
    up = UpStack(tmp, runtime=runtime, env=env)
    up.start()
    (tmp / "work").mkdir()
    try:
        yield up
    finally:
        up.close()


@pytest.fixture(scope="module")
def process_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    yield from _stack(tmp_path_factory.mktemp("docs-process"), "process")


@pytest.fixture(scope="module")
def podman_up(tmp_path_factory: pytest.TempPathFactory, podman_socket: str) -> Iterator[UpStack]:
    yield from _stack(tmp_path_factory.mktemp("docs-podman"), "podman")


def run_block(up: UpStack, block: Block, timeout: float = 150.0) -> None:
    """Run *block*'s commands in one bash (its own process group, killed after *timeout*,
    which stays under the suite's per-test limit so a hang still shows what it printed);
    on any failure, stop what the block left running so the next block gets the stack
    free rather than failing for want of room."""
    try:
        _run_block(up, block, timeout)
    except BaseException:
        _clear(up)
        raise


def _run_block(up: UpStack, block: Block, timeout: float) -> None:
    env = up.environ() | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        # what `jobgate up` without --data-dir uses, for commands that read it (db backup)
        "JOBGATE_DATA_DIR": str(up.data_dir),
    }
    ports = {
        "127.0.0.1:8420": f"127.0.0.1:{up.port}",
        "127.0.0.1:8421": f"127.0.0.1:{up.proxy_port}",
    }
    printed_to = up.tmp / f"block-{os.getpid()}.out"
    with printed_to.open("w+") as sink:
        proc = subprocess.Popen(
            ["bash", "-c", script(block, ports)],
            env=env,
            cwd=up.tmp / "work",
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        sink.seek(0)
        stdout = sink.read()
    outputs = split_output(stdout, len(block.commands))
    for n, (command, (output, rc)) in enumerate(zip(block.commands, outputs, strict=True)):
        where = f"{block.path.relative_to(ROOT)}:{command.line} (block {block.name})"
        shown = f"$ {command.text}\n{output}"
        nxt = block.commands[n + 1].text.strip() if n + 1 < len(block.commands) else ""
        if rc is None:
            log = up.output()[-4000:]
            pytest.fail(f"{where}: did not finish in {timeout:.0f} s\n{shown}\n{log}")
        if rc != 0 and not nxt.startswith("echo $?"):
            pytest.fail(f"{where}: exited {rc}\n{shown}")
        printed = {line.strip() for line in output.splitlines()}  # indentation aside
        for line in command.expected:
            if line.strip() != "..." and line.strip() not in printed:
                pytest.fail(f"{where}: the docs say it prints {line!r}; it printed:\n{shown}")


def _clear(up: UpStack) -> None:
    """Stop every session and endpoint still live on the stack (after a failed block)."""
    for endpoint in up.cli_json("endpoints", "ls"):
        up.cli("endpoints", "rm", endpoint["name"])
    live = up.cli_json("sessions", "ls", "--limit", "500")
    ids = [s["id"] for s in live if s["status"] not in TERMINAL]
    if ids:
        up.cli("sessions", "rm", "--force", *ids)


def _params(modes: set[str]) -> list[object]:
    return [pytest.param(b, id=b.name) for b in BLOCKS if b.mode in modes]


def test_docs_have_console_blocks_and_few_are_illustrative() -> None:
    assert len(BLOCKS) >= 8
    skipped = [b for b in BLOCKS if b.mode == "skip"]
    assert all(b.reason for b in skipped), "a skipped block says why"
    assert len(skipped) <= 5, [b.name for b in skipped]  # keep the illustrative set small


@pytest.mark.parametrize("block", _params({"run"}))
def test_block_runs_on_the_process_runtime(process_up: UpStack, block: Block) -> None:
    run_block(process_up, block)


@pytest.mark.parametrize("block", _params({"run", "podman"}))
def test_block_runs_on_podman(podman_up: UpStack, block: Block) -> None:
    run_block(podman_up, block)
