"""``jobgate run``: submit a session, follow it live, exit with its exit code.

Exit codes: the job's own for SUCCEEDED, FAILED and TERMINATED; 125 when the platform
could not run it (ERROR, as ``docker run`` does); 130 when it was cancelled before it
ran. Ctrl-C once asks the gateway to terminate the session and keeps following it to the
end; twice leaves at once (the session is already being stopped).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from jobgate.client import Client
from jobgate.commands.common import client, parse_pairs
from jobgate.render import Output, err, print_json
from jobgate.workdir import send_working_dir

__all__ = ["build_request", "follow_session", "run"]

EXIT_ERROR = 125
EXIT_CANCELLED = 130


def build_request(
    command: list[str],
    *,
    image: str | None,
    cpu: str | None,
    mem: str | None,
    resources: list[str],
    env: list[str],
    name: str | None,
    interactive: bool,
    mounts: list[str],
    priority: int | None,
    resource_group: str | None,
    project: str | None,
    depends_on: list[str],
    starts_at: str | None,
    constraints: list[str],
) -> dict[str, Any]:
    slots = parse_pairs(resources, "--resource")
    if cpu is not None:
        slots["cpu"] = cpu
    if mem is not None:
        slots["mem"] = mem
    body: dict[str, Any] = {
        "type": "interactive" if interactive else "batch",
        "command": command,
        "resources": slots,
        "env": parse_pairs(env, "--env"),
    }
    optional = {
        "image": image,
        "name": name,
        "priority": priority,
        "resource_group": resource_group,
        "project": project,
        "starts_at": starts_at,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    if mounts:
        body["mounts"] = [_mount(m) for m in mounts]
    if depends_on:
        body["depends_on"] = depends_on
    if constraints:
        body["constraints"] = parse_pairs(constraints, "--constraint")
    return body


def _mount(spec: str) -> dict[str, Any]:
    parts = spec.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise typer.BadParameter(f"--mount takes SRC:DST[:ro], got {spec!r}")
    return {
        "source": parts[0],
        "target": parts[1],
        "read_only": len(parts) == 3 and parts[2] == "ro",
    }


class _Interrupts:
    """First Ctrl-C: terminate the session and keep following. Second: leave now."""

    def __init__(self, api: Client, session_id: str) -> None:
        self.api = api
        self.session_id = session_id
        self.count = 0

    def __enter__(self) -> _Interrupts:
        self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self.previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt
        err.print(f"[yellow]cancelling session {self.session_id[:8]}… (Ctrl-C again to leave)[/]")
        try:
            self.api.delete(f"/v1/sessions/{self.session_id}")
        except Exception as exc:
            err.print(f"[red]could not cancel: {exc}[/]")


def follow_session(api: Client, session_id: str, *, quiet: bool = False) -> int:
    """Stream status and output until the session ends; return the exit code to use."""
    last_note = ""
    end: dict[str, Any] = {}
    with _Interrupts(api, session_id) as interrupts:
        try:
            for event, data in api.follow(f"/v1/sessions/{session_id}/logs", follow="true"):
                if event == "log":
                    stream = sys.stderr if data["stream"] in ("stderr", "system") else sys.stdout
                    stream.write(data["data"])
                    stream.flush()
                elif event in ("status", "progress") and not quiet:
                    note = _note(event, data)
                    if note and note != last_note:
                        last_note = note
                        err.print(f"[dim]{note}[/]")
                elif event == "end":
                    end = data
        except KeyboardInterrupt:
            return EXIT_CANCELLED
    return _exit_code(end, cancelled_by_us=interrupts.count > 0)


def _note(event: str, data: dict[str, Any]) -> str:
    if event == "progress":
        return f"jobgate: {data.get('message', '')}"
    status = data.get("status", "")
    if status in ("RUNNING", "SUCCEEDED", "FAILED"):
        return ""
    reason = data.get("pending_reason") or data.get("reason") or ""
    return f"jobgate: {status}" + (f" ({reason})" if reason else "")


def _exit_code(end: dict[str, Any], *, cancelled_by_us: bool) -> int:
    status = end.get("status")
    code = end.get("exit_code")
    if status in ("SUCCEEDED", "FAILED", "TERMINATED") and code is not None:
        if status == "FAILED" and end.get("reason", "").startswith("out of memory"):
            err.print(f"[red]jobgate: {end['reason']}[/]")
        return int(code)
    if status == "CANCELLED":
        return EXIT_CANCELLED
    if status == "ERROR":
        err.print(f"[red]jobgate: the session could not run: {end.get('reason', '')}[/]")
        return EXIT_ERROR
    if status == "TERMINATED":
        return 143
    if not end:
        err.print("[red]jobgate: the stream ended before the session did[/]")
    return 1 if not cancelled_by_us else EXIT_CANCELLED


def run(
    command: Annotated[list[str] | None, typer.Argument(help="the command, after --")] = None,
    image: Annotated[str | None, typer.Option(help="container image")] = None,
    cpu: Annotated[str | None, typer.Option(help="cores, e.g. 2 or 0.5")] = None,
    mem: Annotated[str | None, typer.Option(help="memory, e.g. 4g or 512m")] = None,
    resource: Annotated[
        list[str], typer.Option("--resource", "-r", help="SLOT=VALUE, e.g. cuda.shares=0.5")
    ] = [],  # noqa: B006
    env: Annotated[list[str], typer.Option("--env", "-e", help="KEY=VALUE")] = [],  # noqa: B006
    name: Annotated[str | None, typer.Option(help="a name for the session")] = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="print the id and return")] = False,
    interactive: Annotated[
        bool, typer.Option(help="an interactive session (runs until terminated)")
    ] = False,
    mount: Annotated[list[str], typer.Option(help="SRC:DST[:ro] from an allowed host root")] = [],  # noqa: B006
    priority: Annotated[int | None, typer.Option(min=0, max=100)] = None,
    resource_group: Annotated[str | None, typer.Option("--group", help="resource group")] = None,
    project: Annotated[str | None, typer.Option()] = None,
    depends_on: Annotated[list[str], typer.Option("--depends-on", help="session id")] = [],  # noqa: B006
    starts_at: Annotated[str | None, typer.Option(help="ISO time or delay like +10m")] = None,
    constraint: Annotated[list[str], typer.Option(help="node label KEY=VALUE")] = [],  # noqa: B006
    idempotency_key: Annotated[str | None, typer.Option(help="retry-safe submission key")] = None,
    output: Annotated[Output, typer.Option("--output", "-o")] = Output.table,
    working_dir: Annotated[
        Path | None,
        typer.Option(
            "--working-dir",
            help="pack this directory (minus .gitignore/.jobgateignore) and start the job "
            "inside a copy of it; uploaded once per distinct tree",
        ),
    ] = None,
) -> None:
    """Run a session and stream its output; exit with its exit code."""
    api = client()
    deps = [api.resolve_session(d) for d in depends_on]
    body = build_request(
        command or [],
        image=image,
        cpu=cpu,
        mem=mem,
        resources=resource,
        env=env,
        name=name,
        interactive=interactive,
        mounts=mount,
        priority=priority,
        resource_group=resource_group,
        project=project,
        depends_on=deps,
        starts_at=starts_at,
        constraints=constraint,
    )
    if working_dir is not None:
        body["working_dir"] = send_working_dir(api, working_dir)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    session = api.post("/v1/sessions", json=body, headers=headers)
    if detach:
        if output == Output.json:
            print_json(session)
        else:
            print(session["id"])
        return
    code = follow_session(api, session["id"])
    if output == Output.json:
        print_json(api.get(f"/v1/sessions/{session['id']}"))
    raise typer.Exit(code)
