"""``jobgate --version``, ``--help`` and a list command start without importing the
server side: each command's module is imported only when it runs (benchmarks/cli_start.py
times them; no timing is asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobgate.cli import COMMANDS
from jobgate.localnet import free_port

#: top-level commands whose module is named otherwise: the components share serve.py
#: (their settings and start-up checks); ``logs`` is ``sessions logs``
ELSEWHERE = {
    "gateway": "serve",
    "scheduler": "serve",
    "worker": "serve",
    "proxy": "serve",
    "logs": "sessions",
}

#: never needed by a client command
SERVER = {
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "redis",
    "pydantic",
    "pydantic_settings",
    "gateway.config",
    "gateway.api",
    "gateway.db",
    "workers",
    "appproxy",
    "pygments",  # httpx's own command line
    "click",  # the real one: Typer brings its own copy
    "pathspec",  # --working-dir only
}
#: not needed to print the version or the list of commands either
CLIENT = {"httpx", "rich", "gateway", "plugins"}

PROBE = """
import json, sys
from jobgate.cli import invoke
code = invoke(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def _imported(tmp_path: Path, *args: str) -> set[str]:
    report = tmp_path / "modules.json"
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": ":".join(sys.path),
        "JOBGATE_CONFIG": str(tmp_path / "absent.toml"),
        "JOBGATE_URL": f"http://127.0.0.1:{free_port()}",  # nothing listens: fails fast
        "JOBGATE_API_KEY": "jg_not_a_key",
    }
    subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *args],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return set(json.loads(report.read_text())["modules"])


def _found(modules: set[str], names: set[str]) -> set[str]:
    return {n for n in names if n in modules or any(m.startswith(f"{n}.") for m in modules)}


@pytest.mark.parametrize("args", [["--version"], ["--help"]], ids=" ".join)
def test_version_and_help_import_neither_server_nor_client(args: list[str], tmp_path: Path) -> None:
    modules = _imported(tmp_path, *args)
    assert _found(modules, SERVER | CLIENT) == set()


def test_a_list_command_imports_the_client_but_nothing_of_the_server(tmp_path: Path) -> None:
    modules = _imported(tmp_path, "sessions", "ls")
    assert {"httpx", "jobgate.commands.sessions"} <= modules
    assert _found(modules, SERVER) == set()
    assert "jobgate.commands.endpoints" not in modules  # nor the other commands


def test_each_command_lives_in_the_module_named_for_it() -> None:
    modules = {name: e.target.partition(":")[0] for name, e in COMMANDS.items()}
    assert all(m.startswith("jobgate.commands.") for m in modules.values())
    named = {name: m.rpartition(".")[2] for name, m in modules.items()}
    assert {name: m for name, m in named.items() if m != name} == ELSEWHERE


def test_a_command_imports_its_own_module_and_not_its_neighbours(tmp_path: Path) -> None:
    modules = _imported(tmp_path, "templates", "ls")
    assert "jobgate.commands.templates" in modules
    assert not {"jobgate.commands.triggers", "jobgate.commands.webhooks"} & modules
