"""``jobgate service install gateway|scheduler|worker|proxy [--user]``: systemd units.

Each component gets ``jobgate-COMPONENT.service``; all of them read one environment
file with the ``JOBGATE_*`` settings (made once, mode 0600, with a fresh node token and
proxy secret; never overwritten). Units are plain files: re-running replaces them.

================  ==========================================  ==================================
                  system (default, as root)                    ``--user`` (no root)
================  ==========================================  ==================================
units             /etc/systemd/system                          ~/.config/systemd/user
environment file  /etc/jobgate/jobgate.env                     ~/.config/jobgate/jobgate.env
runs as           ``--run-as`` (jobgate), state /var/lib/jobgate  the user, state in its data dir
manage            systemctl start|stop|status jobgate-gateway  systemctl --user ...
================  ==========================================  ==================================
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from contract.version import VERSION
from jobgate.render import err, out

__all__ = ["Component", "app", "env_template", "unit_text"]

app = typer.Typer(help="Run the components as systemd services.", no_args_is_help=True)


class Component(StrEnum):
    gateway = "gateway"
    scheduler = "scheduler"
    worker = "worker"
    proxy = "proxy"


@dataclass(frozen=True, slots=True)
class _Shape:
    description: str
    command: str
    stop_timeout_s: int
    after: str


SHAPES = {
    Component.gateway: _Shape(
        "jobgate gateway (REST API and worker-event consumer)",
        "gateway serve",
        30,
        "postgresql.service redis-server.service",
    ),
    Component.scheduler: _Shape(
        "jobgate scheduler (placement passes and the reconciler)",
        "scheduler run",
        30,
        "postgresql.service redis-server.service",
    ),
    # the worker stops its sessions (10 s grace each, in parallel) and reports them
    Component.worker: _Shape(
        "jobgate worker (runs sessions on this node)", "worker run", 90, "redis-server.service"
    ),
    Component.proxy: _Shape(
        "jobgate app proxy (Jupyter, code-server, endpoints)",
        "proxy serve",
        30,
        "redis-server.service",
    ),
}


def unit_text(
    component: Component, *, executable: str, env_file: Path, user_mode: bool, run_as: str
) -> str:
    shape = SHAPES[component]
    lines = [
        f"# Written by `jobgate service install {component}` (jobgate {VERSION}).",
        f"# Settings: {env_file}. Re-run the command to rewrite this file.",
        "[Unit]",
        f"Description={shape.description}",
        "Wants=network-online.target",
        f"After=network-online.target {shape.after}",
        "",
        "[Service]",
        "Type=exec",
    ]
    if not user_mode:
        lines += [
            f"User={run_as}",
            f"Group={run_as}",
            "StateDirectory=jobgate",
            "StateDirectoryMode=0700",
            "Environment=JOBGATE_DATA_DIR=/var/lib/jobgate",
        ]
    lines += [
        f"EnvironmentFile={env_file}",
        f"ExecStart={executable} {shape.command}",
        "Restart=on-failure",
        "RestartSec=5",
        f"TimeoutStopSec={shape.stop_timeout_s}",
        "KillMode=mixed",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "",
        "[Install]",
        f"WantedBy={'default.target' if user_mode else 'multi-user.target'}",
        "",
    ]
    return "\n".join(lines)


def env_template() -> str:
    return f"""\
# jobgate settings for the systemd units (docs/operations.md). It holds secrets: keep it 0600.
# Every JOBGATE_* setting may go here; the units read it at start (systemctl restart ...).
JOBGATE_DATABASE_URL=postgresql://jobgate:CHANGE-ME@127.0.0.1:5432/jobgate
JOBGATE_REDIS_URL=redis://:CHANGE-ME@127.0.0.1:6379/0
JOBGATE_JOIN_TOKEN={secrets.token_urlsafe(32)}
JOBGATE_PROXY_SECRET={secrets.token_urlsafe(32)}
JOBGATE_GATEWAY_URL=http://127.0.0.1:8420
JOBGATE_PROXY_PUBLIC_URL=http://127.0.0.1:8421
# gateway: JOBGATE_HOST=127.0.0.1 JOBGATE_PORT=8420 (its /metrics is on that port)
# scheduler: JOBGATE_SCHEDULER_METRICS_PORT=9420 (Prometheus /metrics; unset: none)
# worker: JOBGATE_WORKER_RUNTIME=podman JOBGATE_PODMAN_SOCKET=unix:///run/user/UID/podman/podman.sock
#         JOBGATE_WORKER_METRICS_PORT=9422
"""


def _executable() -> str:
    found = shutil.which("jobgate")
    if found:
        return str(Path(found).resolve())
    beside = Path(sys.executable).parent / "jobgate"  # a virtualenv not on PATH
    return str(beside.resolve())


def _write_env(path: Path) -> bool:
    """Make the environment file once (0600); False when it was already there."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(env_template())
    return True


@app.command("install")
def install(
    component: Annotated[Component, typer.Argument(help="The component to install.")],
    user: Annotated[bool, typer.Option("--user", help="A user unit (no root needed).")] = False,
    unit_dir: Annotated[
        Path | None, typer.Option("--dir", help="Where units go (default: systemd's).")
    ] = None,
    env_file: Annotated[Path | None, typer.Option(help="The settings file the units read.")] = None,
    run_as: Annotated[str, typer.Option(help="The account of a system unit.")] = "jobgate",
    executable: Annotated[
        str | None, typer.Option("--exec", help="The jobgate program (default: this one).")
    ] = None,
) -> None:
    """Write the systemd unit of a component and, once, its environment file."""
    home = Path.home()
    if unit_dir is None:
        unit_dir = home / ".config/systemd/user" if user else Path("/etc/systemd/system")
    if env_file is None:
        env_file = (
            home / ".config/jobgate/jobgate.env" if user else Path("/etc/jobgate/jobgate.env")
        )
    env_file = env_file.absolute()
    text = unit_text(
        component,
        executable=executable or _executable(),
        env_file=env_file,
        user_mode=user,
        run_as=run_as,
    )
    unit = unit_dir / f"jobgate-{component}.service"
    try:
        unit_dir.mkdir(parents=True, exist_ok=True)
        unit.write_text(text)
        unit.chmod(0o644)
        made = _write_env(env_file)
    except PermissionError as exc:
        err.print(f"[red]error:[/] {exc.filename}: permission denied (root, or --user)")
        raise typer.Exit(1) from None
    out.print(f"wrote {unit}")
    out.print(
        f"wrote {env_file} (new secrets; set the database and Redis URLs)"
        if made
        else f"kept {env_file}"
    )
    ctl = "systemctl --user" if user else "systemctl"
    journal = "journalctl --user" if user else "journalctl"
    out.print(f"next: {ctl} daemon-reload && {ctl} enable --now jobgate-{component}")
    out.print(f"      {ctl} status jobgate-{component}; {journal} -u jobgate-{component} -f")
