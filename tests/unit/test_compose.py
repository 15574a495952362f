"""compose.yaml against the code: real subcommands and options, real JOBGATE_* settings.

Nothing here starts a container; it checks that the file asks only for what exists.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.core
import yaml  # type: ignore[import-untyped]  # (from uvicorn[standard]; no stubs)
from pydantic_settings import BaseSettings
from typer.testing import CliRunner

from appproxy.settings import ProxySettings
from gateway.auth import KEY_PREFIX, KeyCache, authenticate
from gateway.config import GatewaySettings, async_database_url
from gateway.db.engine import create_engine, create_session_factory
from gateway.db.migrate import upgrade
from jobgate import profile
from jobgate.cli import app
from plugins.accelerators.cuda.settings import CudaSettings
from plugins.accelerators.mock import MockSettings
from plugins.accelerators.rocm import RocmSettings
from plugins.accelerators.tpu import TpuSettings
from plugins.runtimes.podman.settings import PodmanSettings
from plugins.runtimes.process import ProcessSettings
from plugins.runtimes.sim import SimSettings
from workers.config import WorkerSettings

COMPOSE_TEXT = (Path(__file__).resolve().parents[2] / "compose.yaml").read_text()
SERVICES: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE_TEXT)["services"]
#: what docs' architecture map names ("postgres, redis, gateway, scheduler, appproxy,
#: workers"), plus the one-shot `jobgate db upgrade` the others wait for
NAMED = {"postgres", "redis", "gateway", "scheduler", "appproxy", "worker", "migrate"}
#: every settings class a component reads JOBGATE_* variables into
SETTINGS: tuple[type[BaseSettings], ...] = (
    GatewaySettings,
    WorkerSettings,
    ProxySettings,
    PodmanSettings,
    ProcessSettings,
    SimSettings,
    CudaSettings,
    RocmSettings,
    TpuSettings,
    MockSettings,
)
#: services that run the jobgate image with its `jobgate` entrypoint
JOBGATE_SERVICES = [n for n, s in SERVICES.items() if "build" in s]


def _settings_variables() -> set[str]:
    return {
        f"{cls.model_config.get('env_prefix', '')}{field}".upper()
        for cls in SETTINGS
        for field in cls.model_fields
    }


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return {k: v for k, _, v in (item.partition("=") for item in env)}
    return dict(env)


def _parse(args: list[str]) -> typer.Context:
    """Resolve ``jobgate ARGS`` to its command and parse its options without running it.

    Through typer's own types: since 0.26 typer vendors click, so ``click.Group`` is not
    what ``get_command`` returns.
    """
    command: Any = typer.main.get_command(app)
    parent = typer.Context(command, info_name="jobgate")
    while isinstance(command, typer.core.TyperGroup):
        assert args, f"{parent.command_path} is a group: name one of its commands"
        name, *args = args
        found = command.get_command(parent, name)
        assert found is not None, f"no command {name!r} under {parent.command_path}"
        if isinstance(found, typer.core.TyperGroup):
            parent = typer.Context(found, info_name=name, parent=parent)
        command = found
    ctx: typer.Context = command.make_context(command.name, args, parent=parent)
    return ctx


def test_compose_has_every_service_the_architecture_names() -> None:
    assert NAMED - SERVICES.keys() == set()
    assert NAMED - {"postgres", "redis"} - set(JOBGATE_SERVICES) == set()


@pytest.mark.parametrize("name", JOBGATE_SERVICES)
def test_service_command_is_a_jobgate_subcommand_with_accepted_options(name: str) -> None:
    command = SERVICES[name]["command"]
    args = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    ctx = _parse(args)
    assert ctx.command.callback is not None


def test_parse_refuses_unknown_commands_and_options() -> None:
    with pytest.raises(AssertionError):
        _parse(["gateway", "serv"])
    with pytest.raises(AssertionError):
        _parse(["gateway"])
    with pytest.raises(Exception, match="No such option: --port"):
        _parse(["scheduler", "run", "--port", "1"])


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_service_sets_only_jobgate_variables_that_are_settings(name: str) -> None:
    ours = {k for k in _environment(SERVICES[name]) if k.startswith("JOBGATE_")}
    assert ours - _settings_variables() == set()


def test_commented_alternatives_name_real_variables_too() -> None:
    client = set(re.findall(r'environ\.get\("(JOBGATE_\w+)"', inspect.getsource(profile)))
    assert "JOBGATE_API_KEY" in client
    named = set(re.findall(r"\bJOBGATE_[A-Z0-9_]+", COMPOSE_TEXT))
    assert named - _settings_variables() - client == set()


@pytest.mark.parametrize("name", ["gateway", "scheduler", "bootstrap"])
def test_database_users_wait_for_the_migration(name: str) -> None:
    assert SERVICES["migrate"]["command"] == ["db", "upgrade"]
    waits_for = SERVICES[name]["depends_on"]["migrate"]["condition"]
    assert waits_for == "service_completed_successfully"


def test_bootstrap_service_prints_an_admin_key_that_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = SERVICES["bootstrap"]
    assert "JOBGATE_DATABASE_URL" in _environment(service)
    url = f"sqlite:///{tmp_path / 'jobgate.db'}"
    monkeypatch.setenv("JOBGATE_DATABASE_URL", url)
    upgrade(async_database_url(url))
    keys = []
    for _ in range(2):  # every run adds a key; the admin is made once
        result = CliRunner().invoke(app, service["command"])
        assert result.exit_code == 0, result.output
        keys.append(result.output.strip())
    assert all(k.startswith(KEY_PREFIX) for k in keys)
    assert keys[0] != keys[1]
    assert asyncio.run(_admins_with_keys(async_database_url(url), keys)) == ["admin", "admin"]


async def _admins_with_keys(database_url: str, keys: list[str]) -> list[str]:
    engine = create_engine(database_url)
    try:
        async with create_session_factory(engine)() as db:
            found = [await authenticate(db, key, KeyCache(0)) for key in keys]
        return [p.name for p in found if p.is_admin]
    finally:
        await engine.dispose()
