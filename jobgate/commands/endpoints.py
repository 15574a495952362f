"""``jobgate endpoints create|ls|show|scale|update|rollback|rm|logs|tokens``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from jobgate.client import ApiError, Client, segment
from jobgate.commands.common import OutputOpt, client, parse_pairs
from jobgate.commands.run import (
    CommandArg,
    EnvOpt,
    ImageOpt,
    ResourceOpt,
    SecretOpt,
    folder_mount,
    follow_session,
    secret_ref,
)
from jobgate.mlflow_models import (
    MODEL_SERVER_HEALTH,
    MODEL_SERVER_IMAGE,
    MODEL_SERVER_PORT,
    model_env,
)
from jobgate.render import Output, age, list_or_json, out, print_json, stamp, table
from jobgate.workdir import send_working_dir

__all__ = ["app"]

app = typer.Typer(
    help="Inference endpoints: one URL in front of autoscaled replicas.", no_args_is_help=True
)
tokens_app = typer.Typer(help="Bearer tokens for calling an endpoint.", no_args_is_help=True)
app.add_typer(tokens_app, name="tokens")

NameArg = Annotated[str, typer.Argument(help="The endpoint's name.")]
PortOpt = Annotated[int, typer.Option(help="The port the server listens on.")]
NewPortOpt = Annotated[int | None, typer.Option("--port", help="A new port (default: the same).")]
ReplicasOpt = Annotated[int | None, typer.Option(help="A fixed number of replicas.")]
MinOpt = Annotated[int | None, typer.Option("--min", help="Autoscale: at least (0: to zero).")]
MaxOpt = Annotated[int | None, typer.Option("--max", help="Autoscale: at most.")]
ConcurrencyOpt = Annotated[
    float | None, typer.Option(help="Autoscale on requests in flight per replica.")
]
RpsOpt = Annotated[float | None, typer.Option(help="Autoscale on requests/s per replica.")]
HealthOpt = Annotated[
    str | None,
    typer.Option(
        help="Readiness probe path (GET, 2xx/3xx is ready; default /, /ping with --mlflow-model)."
    ),
]
FolderOpt = Annotated[
    list[str],
    typer.Option(
        "--folder",
        help="Data folder NAME[:/TARGET][:ro] in every replica (default target "
        "/home/work/NAME); repeatable.",
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--mlflow-model",
        help="Serve this MLflow model (models:/NAME/VERSION, models:/NAME@alias, "
        f"runs:/RUN_ID/path) on {MODEL_SERVER_IMAGE} (or --image), port {MODEL_SERVER_PORT}.",
    ),
]
TrackingOpt = Annotated[
    str | None,
    typer.Option(
        "--tracking-uri",
        help="The MLflow tracking server as replicas reach it (default: $MLFLOW_TRACKING_URI).",
    ),
]
WorkdirOpt = Annotated[
    Path | None,
    typer.Option("--working-dir", help="Pack this directory; replicas start inside a copy."),
]


def _scale_body(
    replicas: int | None,
    min_: int | None,
    max_: int | None,
    concurrency: float | None,
    rps: float | None,
) -> dict[str, Any]:
    if replicas is not None and (min_ is not None or max_ is not None):
        raise ApiError(0, "Usage", "give --replicas, or --min/--max, not both")
    body: dict[str, Any] = {}
    if replicas is not None:
        body["min_replicas"] = body["max_replicas"] = replicas
    if min_ is not None:
        body["min_replicas"] = min_
    if max_ is not None:
        body["max_replicas"] = max_
    if concurrency is not None:
        body["target_concurrency"] = concurrency
    if rps is not None:
        body["target_rps"] = rps
    return body


def _revision_body(
    api: Client,
    command: list[str] | None,
    image: str | None,
    port: int,
    resource: list[str],
    env: list[str],
    health_path: str,
    working_dir: Path | None,
    folders: list[str],
    secrets: list[str],
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "port": port,
        "command": command or [],
        "resources": parse_pairs(resource, "--resource"),
        "env": parse_pairs(env, "--env"),
        "probe": {"path": health_path},
    }
    if folders:
        body["folders"] = [folder_mount(f) for f in folders]
    if secrets:
        body["secrets"] = [secret_ref(s) for s in secrets]
    if image is not None:
        body["image"] = image
    if working_dir is not None:
        body["working_dir"] = send_working_dir(api, working_dir)
    return body


WaitOpt = Annotated[
    bool,
    typer.Option(
        "--wait",
        help="Wait (up to --timeout) until it is HEALTHY or SCALED_TO_ZERO on this revision.",
    ),
]
TimeoutOpt = Annotated[float, typer.Option(help="Seconds --wait waits.")]
SETTLED = frozenset({"HEALTHY", "SCALED_TO_ZERO"})


def _wait(api: Client, name: str, revision: int, timeout: float) -> dict[str, Any]:
    """Poll until the endpoint settled on *revision*; an error when rolled back or late."""
    deadline = time.monotonic() + timeout
    while True:
        e: dict[str, Any] = api.get(f"/v1/endpoints/{segment(name)}")
        if e["revision"] != revision:
            why = [r["reason"] for r in e["revisions"] if r["number"] == revision]
            detail = (why[0] if why else "") or e["status_reason"]
            raise ApiError(0, "Rolled back", f"revision {revision} was rolled back: {detail}")
        if e["status"] in SETTLED and all(r["revision"] == revision for r in e["replicas"]):
            return e
        if time.monotonic() > deadline:
            raise ApiError(
                0,
                "Timeout",
                f"endpoint {name} is {e['status']} after {timeout:g}s: {e['status_reason']}",
            )
        time.sleep(0.5)


def _ready(e: dict[str, Any]) -> str:
    return f"{e['ready_replicas']}/{e['desired_replicas']}"


@app.command("create")
def create(
    name: NameArg,
    port: PortOpt = MODEL_SERVER_PORT,
    command: CommandArg = None,
    image: ImageOpt = None,
    resource: ResourceOpt = [],  # noqa: B006
    env: EnvOpt = [],  # noqa: B006
    replicas: ReplicasOpt = None,
    min_: MinOpt = None,
    max_: MaxOpt = None,
    target_concurrency: ConcurrencyOpt = None,
    target_rps: RpsOpt = None,
    health_path: HealthOpt = None,
    public: Annotated[bool, typer.Option(help="Callable without a token.")] = False,
    working_dir: WorkdirOpt = None,
    folder: FolderOpt = [],  # noqa: B006
    secret: SecretOpt = [],  # noqa: B006
    mlflow_model: ModelOpt = None,
    tracking_uri: TrackingOpt = None,
    wait: WaitOpt = False,
    timeout: TimeoutOpt = 120.0,
    output: OutputOpt = Output.table,
) -> None:
    """Create an endpoint; its URL is the last line printed."""
    extra_env: dict[str, str] = {}
    if tracking_uri is not None and mlflow_model is None:
        raise ApiError(0, "Usage", "--tracking-uri goes with --mlflow-model")
    if mlflow_model is not None:
        try:
            extra_env = model_env(
                mlflow_model, tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
            )
        except ValueError as exc:
            raise ApiError(0, "Usage", str(exc)) from None
        image = image or MODEL_SERVER_IMAGE
        health_path = health_path or MODEL_SERVER_HEALTH
    api = client()
    scale = _scale_body(replicas, min_, max_, target_concurrency, target_rps)
    if "min_replicas" in scale and "max_replicas" not in scale:
        scale["max_replicas"] = max(scale["min_replicas"], 1)
    if "max_replicas" in scale and "min_replicas" not in scale:
        scale["min_replicas"] = 1
    body = _revision_body(
        api, command, image, port, resource, env, health_path or "/", working_dir, folder, secret
    )
    body["env"] = extra_env | body["env"]
    body |= {"name": name, "public": public, "autoscale": scale}
    e = api.post("/v1/endpoints", json=body)
    if wait:
        e = _wait(api, name, e["revision"], timeout)
    if output == Output.json:
        print_json(e)
        return
    out.print(f"endpoint {e['name']}: {e['status']} ({escape(e['status_reason'])})")
    print(e["url"])


@app.command("ls")
def list_endpoints(
    all_users: Annotated[bool, typer.Option("--all", help="Every user's (admins).")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Your endpoints."""
    list_or_json(
        client().get("/v1/endpoints", params={"all": all_users}),
        output,
        ["NAME", "STATUS", "READY", "REV", "URL", "CREATED"],
        lambda e: [
            e["name"],
            e["status"],
            _ready(e),
            str(e["revision"]),
            e["url"],
            age(e["created_at"]),
        ],
    )


@app.command("show")
def show(name: NameArg, output: OutputOpt = Output.table) -> None:
    """Status, URL, revision, replicas and the recent decisions with their inputs."""
    e = client().get(f"/v1/endpoints/{segment(name)}")
    if output == Output.json:
        print_json(e)
        return
    cur = e["current"]
    fields: list[tuple[str, object]] = [
        ("name", e["name"]),
        ("url", e["url"]),
        ("status", e["status"]),
        ("reason", e["status_reason"]),
        ("revision", f"{e['revision']} (last ready: {e['stable_revision'] or '-'})"),
        ("image", cur["image"] or "-"),
        ("port", cur["port"]),
        ("replicas", f"{_ready(e)} ready (desired {e['desired_replicas']})"),
        ("scale", _scale_text(e)),
        ("load", f"{e['in_flight']} in flight, {e['queued']} queued, {e['rps']} req/s"),
        ("public", "yes" if e["public"] else "no (token or the owner's API key)"),
    ]
    width = max(len(f) for f, _ in fields)
    for key, value in fields:
        out.print(f"[bold]{key:<{width}}[/]  {escape(str(value))}")
    table(
        ["#", "REV", "STATE", "SESSION", "NODE", "READY", "IN FLIGHT", "REQ/S", "REASON"],
        [
            [
                str(r["index"]),
                str(r["revision"]),
                r["state"],
                r["session_id"][:8],
                r["node"] or "-",
                "yes" if r["ready"] else "no",
                str(r["in_flight"]),
                f"{r['rps']:g}",
                r["health"] or r["reason"] or "-",
            ]
            for r in e["replicas"]
        ],
    )
    out.print("[bold]recent decisions[/]")
    for ev in e["events"]:
        inputs = ", ".join(f"{k}={v}" for k, v in ev["inputs"].items())
        out.print(f"  {stamp(ev['at'])}  {ev['kind']:<14} {escape(ev['message'])}")
        if inputs:
            out.print(f"  {'':<19}  [dim]{escape(inputs)}[/]")


def _scale_text(e: dict[str, Any]) -> str:
    a = e["autoscale"]
    if a["min_replicas"] == a["max_replicas"]:
        return f"fixed at {a['min_replicas']}"
    target = (
        f"{a['target_rps']} req/s per replica"
        if a.get("target_rps")
        else f"{a.get('target_concurrency') or 1} in flight per replica"
    )
    text = f"{a['min_replicas']}-{a['max_replicas']} on {target}"
    zero = e.get("to_zero_after_s")
    if zero is not None:  # the delays add up: say the sum
        idle = max(a["idle_to_zero_s"], a["stable_window_s"])
        text += (
            f"; zero about {zero:g}s after the last request "
            f"({idle:g}s idle, then the {a['scale_down_delay_s']:g}s scale-down delay)"
        )
    return text


@app.command("scale")
def scale(
    name: NameArg,
    replicas: ReplicasOpt = None,
    min_: MinOpt = None,
    max_: MaxOpt = None,
    target_concurrency: ConcurrencyOpt = None,
    target_rps: RpsOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """A fixed count (--replicas) or an autoscaling range (--min/--max)."""
    body = _scale_body(replicas, min_, max_, target_concurrency, target_rps)
    if not body:
        raise ApiError(
            0,
            "Usage",
            "nothing to change: give --replicas N, or --min N and/or --max M, "
            "and optionally --target-concurrency C or --target-rps R",
        )
    if "min_replicas" in body and body.get("min_replicas") == body.get("max_replicas"):
        body = {"replicas": body.pop("min_replicas")} | {
            k: v for k, v in body.items() if k != "max_replicas"
        }
    e = client().post(f"/v1/endpoints/{segment(name)}/scale", json=body)
    _done(e, output)


def _done(e: dict[str, Any], output: Output) -> None:
    if output == Output.json:
        print_json(e)
        return
    out.print(f"endpoint {e['name']}: revision {e['revision']}, {e['status']}")
    print(e["url"])


@app.command("update")
def update(
    name: NameArg,
    command: CommandArg = None,
    image: ImageOpt = None,
    port: NewPortOpt = None,
    resource: ResourceOpt = [],  # noqa: B006
    env: EnvOpt = [],  # noqa: B006
    health_path: Annotated[str | None, typer.Option(help="A new probe path.")] = None,
    working_dir: WorkdirOpt = None,
    folder: Annotated[
        list[str],
        typer.Option(
            "--folder",
            help="Data folder NAME[:/TARGET][:ro]; repeatable; replaces the revision's folders.",
        ),
    ] = [],  # noqa: B006
    secret: Annotated[
        list[str],
        typer.Option(
            "--secret",
            help="A secret of yours: NAME, NAME:ENV_VAR or NAME:/path; repeatable; "
            "replaces the revision's secrets.",
        ),
    ] = [],  # noqa: B006
    no_secrets: Annotated[
        bool, typer.Option("--no-secrets", help="The new revision receives no secrets.")
    ] = False,
    wait: WaitOpt = False,
    timeout: TimeoutOpt = 120.0,
    output: OutputOpt = Output.table,
) -> None:
    """A new revision: the current one with what is given changed, rolled out without
    dropping requests (replicas start and pass readiness before old ones drain)."""
    api = client()
    body: dict[str, Any] = {}
    if command:
        body["command"] = command
    if image is not None:
        body["image"] = image
    if port is not None:
        body["port"] = port
    if folder:
        body["folders"] = [folder_mount(f) for f in folder]
    if secret and no_secrets:
        raise ApiError(0, "Usage", "give --secret or --no-secrets, not both")
    if secret or no_secrets:
        body["secrets"] = [secret_ref(s) for s in secret]
    if resource or env or health_path:
        cur = api.get(f"/v1/endpoints/{segment(name)}")["current"]
        if resource:
            body["resources"] = cur["resources"] | parse_pairs(resource, "--resource")
        if env:
            body["env"] = cur["env"] | parse_pairs(env, "--env")
        if health_path:
            body["probe"] = cur["probe"] | {"path": health_path}
    if working_dir is not None:
        body["working_dir"] = send_working_dir(api, working_dir)
    e = api.post(f"/v1/endpoints/{segment(name)}/revisions", json=body)
    _done(_wait(api, name, e["revision"], timeout) if wait else e, output)


@app.command("rollback")
def rollback(
    name: NameArg,
    to: Annotated[
        int | None, typer.Option("--to", help="This revision (default: the last ready).")
    ] = None,
    wait: WaitOpt = False,
    timeout: TimeoutOpt = 120.0,
    output: OutputOpt = Output.table,
) -> None:
    """Roll out an earlier revision again (in the background; --wait to see it done)."""
    api = client()
    body = {} if to is None else {"to": to}
    e = api.post(f"/v1/endpoints/{segment(name)}/rollback", json=body)
    _done(_wait(api, name, e["revision"], timeout) if wait else e, output)


@app.command("rm")
def remove(name: NameArg, output: OutputOpt = Output.table) -> None:
    """Delete an endpoint and stop its replicas."""
    e = client().delete(f"/v1/endpoints/{segment(name)}")
    if output == Output.json:
        print_json(e)
        return
    out.print(f"endpoint {e['name']} deleted; its replicas are stopping")


@app.command("logs")
def logs(
    name: NameArg,
    replica: Annotated[int, typer.Option(help="The replica's number (see show).")] = 0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming.")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """A replica's output (it is a session: the same as `jobgate sessions logs`)."""
    api = client()
    e = api.get(f"/v1/endpoints/{segment(name)}")
    found = [r for r in e["replicas"] if r["index"] == replica]
    if not found:
        have = ", ".join(str(r["index"]) for r in e["replicas"]) or "none"
        raise ApiError(0, "Not found", f"endpoint {name} has no replica {replica} (has: {have})")
    session_id = found[0]["session_id"]
    if follow:
        follow_session(api, session_id, cancel_on_interrupt=False, quiet=True)
        return
    entries = api.get(f"/v1/sessions/{segment(session_id)}/logs", params={"format": "json"})[
        "items"
    ]
    if output == Output.json:
        print_json(entries)
        return
    for entry in entries:
        typer.echo(entry["data"], nl=False, err=entry["stream"] != "stdout")


@tokens_app.command("create")
def tokens_create(
    name: NameArg,
    expires: Annotated[str | None, typer.Option(help="Lifetime, e.g. 30d, 12h.")] = None,
    label: Annotated[str, typer.Option("--name", help="A label for the list.")] = "",
    output: OutputOpt = Output.table,
) -> None:
    """A new token; it is printed once (last line), only its hash is kept."""
    body: dict[str, Any] = {"name": label}
    if expires is not None:
        body["expires"] = expires
    t = client().post(f"/v1/endpoints/{segment(name)}/tokens", json=body)
    if output == Output.json:
        print_json(t)
        return
    out.print(f"token {t['id']} (expires {stamp(t['expires_at']) if t['expires_at'] else 'never'})")
    print(t["token"])


@tokens_app.command("ls")
def tokens_list(name: NameArg, output: OutputOpt = Output.table) -> None:
    """The endpoint's tokens (never the tokens themselves)."""
    list_or_json(
        client().get(f"/v1/endpoints/{segment(name)}/tokens"),
        output,
        ["ID", "NAME", "PREFIX", "EXPIRES", "STATE"],
        lambda t: [
            t["id"],
            t["name"] or "-",
            t["prefix"] + "…",
            stamp(t["expires_at"]) if t["expires_at"] else "never",
            "revoked" if t["revoked_at"] else "active",
        ],
    )


@tokens_app.command("revoke")
def tokens_revoke(
    name: NameArg,
    token_id: Annotated[str, typer.Argument(help="The token's id (see tokens ls).")],
    output: OutputOpt = Output.table,
) -> None:
    """Revoke a token; proxies refuse it within a second."""
    client().delete(f"/v1/endpoints/{segment(name)}/tokens/{segment(token_id)}")
    if output == Output.json:
        print_json({"id": token_id, "revoked": True})
        return
    out.print(f"token {token_id} revoked")
