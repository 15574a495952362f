"""``jobgate run``: submit a session, follow it live, exit with its exit code.

Exit codes: the job's own for SUCCEEDED, FAILED and TERMINATED (143, SIGTERM's, when
Ctrl-C stopped it while it ran); 125 when the platform could not run it (ERROR, as
``docker run`` does); 130 when it was cancelled before it ran (Ctrl-C while PENDING) or
you left with a second Ctrl-C. Ctrl-C once asks the gateway to terminate the session
and keeps following it to the end; twice leaves at once (the session is already being stopped).

Only ``run`` in the foreground cancels on Ctrl-C; ``sessions logs -f`` only stops
following. stdout carries the job's stdout (or, with ``-o json``, only the final session
as JSON, the job's output then going to stderr); jobgate's own notes go to stderr.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, TextIO

import typer

from jobgate.client import ApiError, Client, segment
from jobgate.commands.arrays import wait_array
from jobgate.commands.common import OutputOpt, client, parse_pairs
from jobgate.progress import Progress
from jobgate.render import Output, between, duration, err, print_json, short_id

APP_WAIT_S = 120.0

__all__ = ["DEFAULT_CPU", "DEFAULT_MEM", "build_request", "follow_session", "run", "wait_for"]

EXIT_ERROR = 125
TERMINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "TERMINATED", "CANCELLED", "ERROR"})
EXIT_CANCELLED = 130


# -- the options `run` and `sessions create` share ------------------------------------------
CommandArg = Annotated[
    list[str] | None, typer.Argument(help="The command and its arguments, after --.")
]
ImageOpt = Annotated[str | None, typer.Option(help="Container image (default: the gateway's).")]
#: what the gateway gives a session that asks for no cpu or memory
#: (gateway/services/sessions/placement.py, ``Placement.defaults``)
DEFAULT_CPU, DEFAULT_MEM = "0.5", "512MiB"
CpuOpt = Annotated[str | None, typer.Option(help=f"Cores, e.g. 2 or 0.5 (default: {DEFAULT_CPU}).")]
MemOpt = Annotated[
    str | None, typer.Option(help=f"Memory, e.g. 4g or 512m (default: {DEFAULT_MEM}).")
]
ResourceOpt = Annotated[
    list[str],
    typer.Option("--resource", "-r", help="SLOT=VALUE, e.g. cuda.shares=0.5; repeatable."),
]
EnvOpt = Annotated[
    list[str], typer.Option("--env", "-e", help="KEY=VALUE environment; repeatable.")
]
SecretOpt = Annotated[
    list[str],
    typer.Option(
        "--secret",
        help="A secret of yours (jobgate secrets): NAME (as $NAME), NAME:ENV_VAR or "
        "NAME:/path (a file of mode 0400); repeatable.",
    ),
]
NameOpt = Annotated[
    str | None,
    typer.Option(help="A name, unique among your live sessions (usable instead of the id)."),
]


class ClusterModeOpt(StrEnum):
    single_node = "single-node"
    multi_node = "multi-node"


class StopWhenOpt(StrEnum):
    main_done = "main-done"
    all_done = "all-done"


def build_request(
    command: list[str],
    *,
    image: str | None,
    cpu: str | None,
    mem: str | None,
    resources: list[str],
    env: list[str],
    name: str | None = None,
    interactive: bool = False,
    mounts: list[str] | None = None,
    priority: int | None = None,
    resource_group: str | None = None,
    project: str | None = None,
    depends_on: list[str] | None = None,
    starts_at: str | None = None,
    constraints: list[str] | None = None,
    max_retries: int | None = None,
    preemptible: bool | None = None,
    cluster_size: int | None = None,
    cluster_mode: str | None = None,
    stop_when: str | None = None,
    folders: list[str] | None = None,
    automount: bool = True,
    secrets: list[str] | None = None,
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
        "max_retries": max_retries,
        "preemptible": preemptible,
        "cluster_size": cluster_size,
        "cluster_mode": cluster_mode,
        "stop_when": stop_when,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    if mounts:
        body["mounts"] = [_mount(m) for m in mounts]
    if folders:
        body["folders"] = [folder_mount(f) for f in folders]
    if secrets:
        body["secrets"] = [secret_ref(s) for s in secrets]
    if not automount:
        body["automount"] = False
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


def folder_mount(spec: str) -> dict[str, Any]:
    """``NAME[:TARGET][:ro]`` -> a folder mount (default target /home/work/NAME)."""
    parts = spec.split(":")
    mode = parts.pop() if len(parts) > 1 and parts[-1] in ("ro", "rw") else "rw"
    if not parts[0] or len(parts) > 2 or (len(parts) == 2 and not parts[1].startswith("/")):
        raise typer.BadParameter(f"--folder takes NAME[:/TARGET][:ro], got {spec!r}")
    mount: dict[str, Any] = {"name": parts[0], "read_only": mode == "ro"}
    if len(parts) == 2:
        mount["target"] = parts[1]
    return mount


def secret_ref(spec: str) -> dict[str, Any]:
    """``NAME``, ``NAME:ENV_VAR`` or ``NAME:/path/in/container`` -> a secret reference."""
    name, _, target = spec.partition(":")
    if not name:
        raise typer.BadParameter(f"--secret takes NAME[:ENV_VAR|:/PATH], got {spec!r}")
    if not target:
        return {"name": name}
    return {"name": name, "path" if target.startswith("/") else "env": target}


class _Interrupts:
    """``run`` in the foreground: the first Ctrl-C terminates the session (and says so)
    and keeps following it to its end; the second leaves at once."""

    def __init__(self, api: Client, session_id: str, progress: Progress) -> None:
        self.api = api
        self.session_id = session_id
        self.progress = progress
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
        self.progress.say(
            f"jobgate: Ctrl-C: cancelling session {short_id(self.session_id)} "
            "(Ctrl-C again to leave without waiting)"
        )
        try:
            self.api.delete(f"/v1/sessions/{segment(self.session_id)}")
        except Exception as exc:
            self.progress.say(f"jobgate: could not cancel: {exc}")


class _Detach:
    """``sessions logs -f``: Ctrl-C only stops following; the session keeps running."""

    def __init__(self, api: Client, session_id: str, progress: Progress) -> None:
        self.count = 0

    def __enter__(self) -> _Detach:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def follow_session(
    api: Client,
    session_id: str,
    *,
    cancel_on_interrupt: bool = True,
    quiet: bool = False,
    job_stdout: TextIO | None = None,
    on_running: Any = None,
    kernels: set[str] | None = None,
    params: dict[str, Any] | None = None,
) -> tuple[int, dict[str, Any]]:
    """Stream status and output until the session ends.

    Returns the exit code to use and the last ``end`` event (empty if there was none).
    *kernels*: only these kernels' output (None: every kernel's); *params*: more query
    parameters of the logs request (``attempt``).
    With *cancel_on_interrupt* (``run``), Ctrl-C cancels the session; without it
    (``sessions logs -f``), Ctrl-C leaves and the session carries on.
    """
    end: dict[str, Any] = {}
    progress = Progress(session_id, quiet=quiet)
    guard = _Interrupts if cancel_on_interrupt else _Detach
    with guard(api, session_id, progress) as interrupts:
        try:
            for event, data in api.follow(
                f"/v1/sessions/{segment(session_id)}/logs", follow="true", **(params or {})
            ):
                if event == "log":
                    if kernels is not None and data.get("kernel") not in kernels:
                        continue
                    progress.output_starts()
                    stdout = job_stdout or sys.stdout
                    stream = sys.stderr if data["stream"] in ("stderr", "system") else stdout
                    stream.write(data["data"])
                    stream.flush()
                elif event == "status":
                    progress.status(data)
                    if data.get("status") == "RUNNING" and on_running is not None:
                        on_running()
                        on_running = None
                elif event == "progress":
                    progress.note(str(data.get("message", "")))
                elif event == "end":
                    end = data
        except KeyboardInterrupt:
            progress.stop()
            if cancel_on_interrupt:
                progress.say(
                    f"jobgate: left; session {short_id(session_id)} is being stopped "
                    f"(`jobgate sessions show {short_id(session_id)}`)"
                )
            else:
                progress.say(
                    f"jobgate: stopped following; session {short_id(session_id)} keeps running "
                    f"(`jobgate sessions logs {short_id(session_id)} -f` to follow again)"
                )
            return EXIT_CANCELLED, end
        finally:
            progress.stop()
    return _exit_code(end, cancelled_by_us=interrupts.count > 0), end


def _run_array(api: Client, first: dict[str, Any], *, detach: bool, output: Output) -> None:
    """``run --count N``: the array id at once with --detach, else wait for all of it."""
    array_id, size = first["array_id"], first["array_size"]
    if detach:
        if output == Output.json:
            print_json(first)
        else:
            print(array_id)
        return
    err.print(f"jobgate: array {array_id} of {size} sessions submitted", markup=False)
    code, sessions = wait_array(api, array_id, size)
    if output == Output.json:
        print_json(sessions)
    elif sessions:
        failed = sum(s["status"] != "SUCCEEDED" for s in sessions)
        err.print(
            f"jobgate: array {array_id}: {len(sessions) - failed} of {size} succeeded, "
            f"exit code {code}",
            markup=False,
        )
    raise typer.Exit(code)


def _exit_code(end: dict[str, Any], *, cancelled_by_us: bool) -> int:
    status = end.get("status")
    code = end.get("exit_code")
    if status in ("SUCCEEDED", "FAILED", "TERMINATED") and code is not None:
        if status == "FAILED" and end.get("reason", "").startswith("out of memory"):
            err.print(f"jobgate: {end['reason']}", markup=False)
        return int(code)
    if status == "CANCELLED":
        return EXIT_CANCELLED
    if status == "ERROR":
        err.print(f"jobgate: the session could not run: {end.get('reason', '')}", markup=False)
        return EXIT_ERROR
    if status == "TERMINATED":
        return 143
    if not end:
        err.print("jobgate: the stream ended before the session did", markup=False)
    return 1 if not cancelled_by_us else EXIT_CANCELLED


def _summary(session: dict[str, Any], code: int) -> str:
    status = session.get("status", "?")
    parts = [f"jobgate: {status}"]
    if session.get("exit_code") is not None:
        parts.append(f"exit code {session['exit_code']}")
    ran = between(session.get("started_at"), session.get("ended_at"))
    since_submit = duration(between(session.get("created_at"), session.get("ended_at")))
    if ran is not None:
        parts.append(f"ran {duration(ran)}")
    elif session.get("exit_code") is not None:  # it ran, but its start was not recorded
        parts.append(f"took {since_submit}")
    else:
        parts.append(f"waited {since_submit}")
    parts.append(f"session {short_id(session.get('id'))}")
    return ", ".join(parts)


def _watch_apps(api: Client, session_id: str, say: Any, stop: threading.Event) -> None:
    """Print a sign-in link for each app of an interactive session once it is ready."""
    shown: set[str] = set()
    deadline = APP_WAIT_S
    while not stop.is_set() and deadline > 0:
        try:
            apps = api.get(f"/v1/sessions/{segment(session_id)}/apps")
            for app in apps:
                if app["ready"] and app["name"] not in shown:
                    link = api.post(
                        f"/v1/sessions/{segment(session_id)}/apps/{segment(app['name'])}"
                    )
                    shown.add(app["name"])
                    say(f"jobgate: {app['name']} is ready: {link['url']}")
            if apps and len(shown) == len(apps):
                return
        except Exception as exc:  # best effort: the session itself goes on
            say(f"jobgate: could not read the apps: {exc}")
            return
        stop.wait(1.0)
        deadline -= 1.0


def run(
    command: CommandArg = None,
    image: ImageOpt = None,
    cpu: CpuOpt = None,
    mem: MemOpt = None,
    resource: ResourceOpt = [],  # noqa: B006
    env: EnvOpt = [],  # noqa: B006
    name: NameOpt = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Print the id and return at once.")
    ] = False,
    interactive: Annotated[
        bool,
        typer.Option(help="An interactive session: runs until stopped; app links are printed."),
    ] = False,
    mount: Annotated[
        list[str], typer.Option(help="SRC:DST[:ro] from an allowed host root; repeatable.")
    ] = [],  # noqa: B006
    folder: Annotated[
        list[str],
        typer.Option(
            help="Data folder NAME[:/TARGET][:ro] in every container (default target "
            "/home/work/NAME); repeatable.",
        ),
    ] = [],  # noqa: B006
    no_automount: Annotated[
        bool,
        typer.Option("--no-automount", help="Do not mount your dot-folders (.local, .cache ...)."),
    ] = False,
    secret: SecretOpt = [],  # noqa: B006
    priority: Annotated[
        int | None, typer.Option(min=0, max=100, help="Higher runs first (default: 50).")
    ] = None,
    resource_group: Annotated[
        str | None, typer.Option("--group", help="Resource group to run in.")
    ] = None,
    project: Annotated[str | None, typer.Option(help="Project to charge it to.")] = None,
    depends_on: Annotated[
        list[str],
        typer.Option("--depends-on", help="Start after this session succeeded; repeatable."),
    ] = [],  # noqa: B006
    starts_at: Annotated[
        str | None, typer.Option(help="Not before this ISO time, or after a delay like +10m.")
    ] = None,
    constraint: Annotated[
        list[str], typer.Option(help="Node label KEY=VALUE it must run on; repeatable.")
    ] = [],  # noqa: B006
    idempotency_key: Annotated[
        str | None, typer.Option(help="Retry-safe key: the same key returns the same session.")
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="Follow it to its end and exit with its code (the default; for CI)."
        ),
    ] = False,
    callback_url: Annotated[
        str | None,
        typer.Option(
            help="A URL told (signed POST) when it ends, signed with $JOBGATE_CALLBACK_SECRET "
            "(whsec_...) or a new secret (-d -o json shows it); see docs/pipelines.md."
        ),
    ] = None,
    output: OutputOpt = Output.table,
    max_retries: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=100,
            help="Runs again elsewhere this many times if its node is lost "
            "(default: the resource group's, else the gateway's).",
        ),
    ] = None,
    preemptible: Annotated[
        bool | None,
        typer.Option(
            "--preemptible/--no-preemptible",
            help="May be stopped for a higher-ranked session and queued again, where its "
            "resource group preempts (default: batch yes, interactive no).",
            show_default=False,
        ),
    ] = None,
    working_dir: Annotated[
        Path | None,
        typer.Option(
            "--working-dir",
            help="Pack this directory (minus .gitignore/.jobgateignore) and start the job "
            "inside a copy of it; uploaded once per distinct tree.",
        ),
    ] = None,
    cluster_size: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Containers of the session (main1, sub1, ...); resources are per container. "
            "At most the resource group's max_cluster_size (16 unless its config says "
            "otherwise). Needs --cluster-mode.",
        ),
    ] = None,
    cluster_mode: Annotated[
        ClusterModeOpt | None,
        typer.Option(
            help="single-node: all on one node, private network; multi-node: across nodes."
        ),
    ] = None,
    stop_when: Annotated[
        StopWhenOpt | None,
        typer.Option(help="A cluster session ends when main1 ends (main-done) or all end."),
    ] = None,
    count: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="An array: N sessions, all or none, each with JOBGATE_ARRAY_INDEX 0..N-1; "
            "waits for all and exits with the highest exit code (0: all succeeded).",
        ),
    ] = None,
) -> None:
    """Run a session and stream its output; exit with its exit code.

    While it waits, one line on stderr says its status, why it waits and for how long;
    when it ends, one line says its status, exit code and run time. Its stdout goes to
    stdout, its stderr to stderr; jobgate's own notes always go to stderr. With -o json
    stdout holds only the final session as JSON (the job's output goes to stderr).

    Ctrl-C once cancels the session (it says so) and waits for it to end; Ctrl-C twice
    leaves at once.

    Exit code: the job's own when it ran (SUCCEEDED, FAILED, TERMINATED); so 143 (SIGTERM)
    when Ctrl-C stopped it while RUNNING; 130 when Ctrl-C cancelled it while it waited
    (PENDING), or you left with a second Ctrl-C; 125 if the platform could not run it
    (ERROR); 1 if the stream ended before the session did.
    """
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
        max_retries=max_retries,
        preemptible=preemptible,
        cluster_size=cluster_size,
        cluster_mode=cluster_mode.value if cluster_mode else None,
        stop_when=stop_when.value if stop_when else None,
        folders=folder,
        automount=not no_automount,
        secrets=secret,
    )
    if working_dir is not None:
        from jobgate.workdir import send_working_dir  # pathspec, tar: only when asked

        body["working_dir"] = send_working_dir(api, working_dir)
    if callback_url is not None:
        body["callback_url"] = callback_url
        if os.environ.get("JOBGATE_CALLBACK_SECRET"):  # the receiver's whsec_ secret
            body["callback_secret"] = os.environ["JOBGATE_CALLBACK_SECRET"]
    if wait and detach:
        raise ApiError(0, "Usage", "--wait and --detach exclude each other")
    if count is not None:
        body["count"] = count
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    session = api.post("/v1/sessions", json=body, headers=headers)
    session_id = session["id"]
    if count is not None:
        _run_array(api, session, detach=detach, output=output)
        return
    if detach:
        if output == Output.json:
            print_json(session)
        else:
            print(session_id)
        return
    wait_for(api, session_id, output, interactive=interactive)


def wait_for(api: Client, session_id: str, output: Output, *, interactive: bool = False) -> None:
    """Follow a submitted session to its end (output streamed, a summary line on
    stderr, ``-o json``: the final session on stdout) and exit with its exit code.
    ``run`` and ``templates run --wait`` both end here."""
    err.print(f"jobgate: session {session_id} submitted", markup=False)
    stop_apps = threading.Event()
    watcher: list[threading.Thread] = []

    def on_running() -> None:
        if not interactive:
            return
        apps_api = client()
        thread = threading.Thread(
            target=_watch_apps,
            args=(apps_api, session_id, lambda text: err.print(text, markup=False), stop_apps),
            daemon=True,
        )
        thread.start()
        watcher.append(thread)

    code, _ = follow_session(
        api,
        session_id,
        job_stdout=sys.stderr if output == Output.json else None,
        on_running=on_running,
    )
    stop_apps.set()
    final = api.get(f"/v1/sessions/{segment(session_id)}")
    if final.get("status") in TERMINAL_STATUSES:
        err.print(_summary(final, code), markup=False)
    if output == Output.json:
        print_json(final)
    raise typer.Exit(code)
