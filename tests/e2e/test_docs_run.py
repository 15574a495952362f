"""The docs are true on a fresh machine: every ``console`` block of README.md and
docs/*.md runs against a `jobgate up` (process runtime, and Podman), in file order, and
prints what the docs say it prints. Conventions: ``tests/docs_blocks.py``.

A failure names the block (file:line), the command and its line, its exit code and
what it printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomli_w
from docs_blocks import Block, console_blocks, script, split_output
from up_harness import UpStack

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


def run_block(up: UpStack, block: Block, timeout: float = 300.0) -> None:
    env = up.environ() | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        # what `jobgate up` without --data-dir uses, for commands that read it (db backup)
        "JOBGATE_DATA_DIR": str(up.data_dir),
    }
    ports = {
        "127.0.0.1:8420": f"127.0.0.1:{up.port}",
        "127.0.0.1:8421": f"127.0.0.1:{up.proxy_port}",
    }
    result = subprocess.run(
        ["bash", "-c", script(block, ports)],
        env=env,
        cwd=up.tmp / "work",
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    outputs = split_output(result.stdout, len(block.commands))
    for n, (command, (output, rc)) in enumerate(zip(block.commands, outputs, strict=True)):
        where = f"{block.path.relative_to(ROOT)}:{command.line} (block {block.name})"
        shown = f"$ {command.text}\n{output}"
        nxt = block.commands[n + 1].text.strip() if n + 1 < len(block.commands) else ""
        if rc is None:
            pytest.fail(f"{where}: did not finish\n{shown}\n{result.stderr}")
        if rc != 0 and not nxt.startswith("echo $?"):
            pytest.fail(f"{where}: exited {rc}\n{shown}")
        printed = {line.strip() for line in output.splitlines()}  # indentation aside
        for line in command.expected:
            if line.strip() != "..." and line.strip() not in printed:
                pytest.fail(f"{where}: the docs say it prints {line!r}; it printed:\n{shown}")


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
