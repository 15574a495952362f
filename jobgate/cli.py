"""The ``jobgate`` command: a thin client over the API, plus the components themselves.

::

    jobgate up                          the whole stack on this machine
    jobgate run [OPTIONS] -- CMD...     run a session, stream it, exit with its code
    jobgate sessions ls|show|logs|rm|create
    jobgate folders create|ls|show|rm|purge|restore|share|unshare|put|get|rm-path|mv
    jobgate nodes ls|show|drain|cordon|uncordon
    jobgate usage [--by user|project|group] [-g hour|day|week] [--from] [--to] [--csv]
    jobgate usage shares [--group G]
    jobgate admin users|projects|policies|groups ...
    jobgate apps ls|open SESSION [APP]        jobgate images ls|add|rm
    jobgate gateway serve | scheduler run | worker run | proxy serve
    jobgate db upgrade|backup|restore   jobgate service install   jobgate admin config
    jobgate templates|triggers|webhooks ...   (docs/pipelines.md)
    jobgate keys create|ls|revoke       your API keys: scoped, expiring
    jobgate secrets create|ls|rm|rotate values sessions receive, never shown back

:func:`main` is the one place errors reach the user: every failure is one line on
stderr (``error: …``) and an exit code; a Python traceback never reaches a user.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperArgument, TyperGroup
from typer.models import CommandInfo

from jobgate.errors import ApiError

try:  # newer Typer ships its own copy of click; its exceptions are those
    from typer._click import exceptions as clickx
    from typer._click.utils import make_default_short_help
except ImportError:  # pragma: no cover - older Typer, on click itself
    from click import exceptions as clickx  # type: ignore[no-redef]
    from click.utils import make_default_short_help  # type: ignore[no-redef]

__all__ = [
    "COMMANDS",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "PANELS",
    "app",
    "command_tree",
    "invoke",
    "main",
]

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: what people type for GPUs, and what a command with --resource takes instead
GPU_OPTIONS = ("--gpu", "--gpus")
GPU_HINT = (
    "GPUs are resources: -r cuda.shares=0.5 (a share of one GPU) or -r cuda.device=1 (whole GPUs)"
)

#: the sections of ``jobgate --help``, in order: what a user types, then what runs jobgate
USE, OPERATE = "Commands", "Running jobgate"
PANELS = (USE, OPERATE)


@dataclass(frozen=True)
class Entry:
    """A top-level command, imported only when it runs (or its help is asked for):
    ``module:attr`` is a Typer sub-app or a command function; *help* is its line in
    ``jobgate --help``, so the list costs no import."""

    target: str
    help: str
    panel: str = USE
    settings: tuple[tuple[str, Any], ...] = ()


#: every top-level command, in the order ``jobgate --help`` lists them
COMMANDS: dict[str, Entry] = {
    "up": Entry("jobgate.commands.up:up", "Start the whole stack on this machine."),
    "run": Entry(
        "jobgate.commands.run:run",
        "Run a session and stream its output; exit with its exit code.",
        settings=(("allow_interspersed_args", False),),
    ),
    "logs": Entry("jobgate.commands.sessions:logs", "Output of a session (= sessions logs)."),
    "sessions": Entry("jobgate.commands.sessions:app", "Sessions: list, inspect, follow, stop."),
    "endpoints": Entry(
        "jobgate.commands.endpoints:app",
        "Inference endpoints: one URL in front of autoscaled replicas.",
    ),
    "folders": Entry(
        "jobgate.commands.folders:app", "Data folders: storage that outlives sessions."
    ),
    "secrets": Entry(
        "jobgate.commands.secrets:app",
        "User secrets: tokens and passwords your sessions receive.",
    ),
    "apps": Entry(
        "jobgate.commands.apps:app",
        "Apps of interactive sessions: Jupyter, code-server, terminals.",
    ),
    "images": Entry("jobgate.commands.images:app", "Images and the apps they serve."),
    "templates": Entry(
        "jobgate.commands.templates:app",
        "Job templates: a session with parameters, run by name.",
    ),
    "triggers": Entry(
        "jobgate.commands.triggers:app",
        "Inbound CI triggers: signed hooks that run a template.",
    ),
    "webhooks": Entry(
        "jobgate.commands.webhooks:app",
        "Outbound webhooks: signed POSTs when sessions end.",
    ),
    "nodes": Entry("jobgate.commands.nodes:app", "Nodes: capacity, allocation, devices, liveness."),
    "login": Entry("jobgate.commands.login:login", "Sign in through your identity provider (SSO)."),
    "logout": Entry("jobgate.commands.logout:logout", "Forget the sign-in `login` made."),
    "keys": Entry("jobgate.commands.keys:app", "Your API keys: scoped, expiring, revocable."),
    "usage": Entry(
        "jobgate.commands.usage:app",
        "Resources used: cpu, memory and GPU hours by user, project or group.",
    ),
    "admin": Entry(
        "jobgate.commands.admin:app",
        "Users, projects, policies, groups (needs an admin key).",
        OPERATE,
    ),
    "gateway": Entry("jobgate.commands.serve:gateway_app", "The API gateway.", OPERATE),
    "scheduler": Entry("jobgate.commands.serve:scheduler_app", "The scheduler.", OPERATE),
    "worker": Entry("jobgate.commands.serve:worker_app", "The node daemon.", OPERATE),
    "proxy": Entry("jobgate.commands.serve:proxy_app", "The app proxy.", OPERATE),
    "db": Entry("jobgate.commands.db:app", "The database: upgrade, backup, restore.", OPERATE),
    "service": Entry(
        "jobgate.commands.service:app", "Run the components as systemd services.", OPERATE
    ),
}


class Root(TyperGroup):
    """The ``jobgate`` group: its commands come from :data:`COMMANDS`, each module
    imported the first time its command is needed, and ``--help`` lists them by panel
    without importing any."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.commands[cmd_name] = _load(cmd_name, COMMANDS[cmd_name])
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """Typer's "Did you mean" looks only at loaded commands: offer every one."""
        try:
            return super().resolve_command(ctx, args)
        except clickx.UsageError as exc:
            if args and "Did you mean" not in exc.message:
                from difflib import get_close_matches

                if matches := get_close_matches(args[0], list(COMMANDS)):
                    named = ", ".join(repr(m) for m in matches)
                    exc.message = f"{exc.message.rstrip('.')}. Did you mean {named}?"
            raise

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        for panel in PANELS:
            rows = [(name, e.help) for name, e in COMMANDS.items() if e.panel == panel]
            with formatter.section(panel):
                formatter.write_dl(rows)


app = typer.Typer(
    name="jobgate",
    cls=Root,
    help="A serverless job gateway for GPU clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from contract.version import VERSION

        print(f"jobgate {VERSION}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            callback=_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """A serverless job gateway for GPU clusters.

    Start everything on this machine with `jobgate up`, then `jobgate run -- CMD`.
    """


def _load(name: str, entry: Entry) -> Any:
    module, attr = entry.target.split(":")
    target = getattr(importlib.import_module(module), attr)
    command: Any
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        info = CommandInfo(name=name, callback=target, context_settings=dict(entry.settings))
        command = typer.main.get_command_from_info(
            info, pretty_exceptions_short=True, rich_markup_mode=None
        )
    command.name = name
    command.short_help = entry.help
    command.rich_help_panel = entry.panel
    _readable(command)
    return command


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _usage(exc: clickx.UsageError) -> int:
    if isinstance(exc, clickx.NoArgsIsHelpError):
        exc.show()
        return exc.exit_code
    where = exc.ctx.command_path if exc.ctx is not None else "jobgate"
    message = " ".join(exc.format_message().split()).replace("Value error, ", "")
    gpus = _gpu_option(exc)
    if gpus is not None:
        message = f"no option {gpus}: {GPU_HINT}"
    _say(f"error: {message} (see `{where} --help`)")
    return EXIT_USAGE


def _gpu_option(exc: clickx.UsageError) -> str | None:
    """``--gpu`` (or ``--gpus``) when given to a command that takes ``--resource``."""
    if not isinstance(exc, clickx.NoSuchOption) or exc.option_name not in GPU_OPTIONS:
        return None
    if exc.ctx is None:
        return None
    takes = any("--resource" in getattr(p, "opts", ()) for p in exc.ctx.command.params)
    return exc.option_name if takes else None


def _metavar(param: Any) -> str:
    """``batch|interactive`` for choices, ``N`` for numbers, else the option's name."""
    kind = param.type
    choices = getattr(kind, "choices", None)  # click's Choice, Typer's TyperChoice
    if choices:
        return "|".join(str(getattr(c, "value", c)) for c in choices)
    if str(getattr(kind, "name", "")).startswith(("int", "float")):  # and their ranges
        return "N"
    return str(param.name).upper().replace("_", "-")


def _no_type(ctx: Any) -> str:
    return ""


class _Argument(TyperArgument):
    """An argument as usage lines have always shown one: ``SESSION`` when required,
    ``[SESSION]`` when not (Typer's own writes ``{SESSION}``)."""

    def make_metavar(self, ctx: Any, *, usage: bool = False) -> str:
        var = super().make_metavar(ctx)
        return f"[{var}]" if usage and not self.required and not var.startswith("[") else var


def _readable(root: Any) -> None:
    """Help texts a person reads: value names instead of type names (``--cpu CPU``,
    ``--limit N``, ``--type batch|interactive``), arguments without braces, every
    command's first sentence whole in its group's list (never cut to ``...``)."""
    stack = [root]
    while stack:
        command = stack.pop()
        subs = getattr(command, "commands", {})
        stack.extend(subs.values())
        for sub in subs.values():
            if not sub.short_help:
                sub.short_help = make_default_short_help(sub.help or "", 10_000)
        if hasattr(command, "rich_markup_mode"):
            command.rich_markup_mode = None
        for param in command.params:
            if param.metavar is None and not getattr(param, "is_flag", False):
                param.metavar = _metavar(param)
            if isinstance(param, TyperArgument):
                param.__class__ = _Argument
                param.display_type_rich = _no_type  # type: ignore[attr-defined]


def _root_command() -> Any:
    root = typer.main.get_command(app)
    _readable(root)
    return root


def command_tree() -> Any:
    """The whole click command tree of the app, every command loaded (for tests and
    tools that walk it), with the readable help texts of :func:`_readable`."""
    root = _root_command()
    ctx = typer.Context(root)
    for name in COMMANDS:
        root.get_command(ctx, name)
    return root


def _close_clients() -> None:
    common = sys.modules.get("jobgate.commands.common")  # loaded only if a command used it
    if common is not None:
        common.close_clients()


def invoke(args: Sequence[str] | None = None) -> int:
    """Run the CLI with *args* (default: ``sys.argv``); return the exit code."""
    try:
        command = _root_command()
        result = command.main(args=args, prog_name="jobgate", standalone_mode=False)
    except clickx.UsageError as exc:
        return _usage(exc)
    except clickx.ClickException as exc:
        _say(f"error: {exc.format_message()}")
        return exc.exit_code
    except ApiError as exc:
        named = not exc.field or exc.detail.startswith(f"{exc.field}: ")
        where = "" if named else f" ({exc.field})"  # a validation detail starts with it
        _say(f"error: {exc.detail}{where}")
        return EXIT_USAGE if exc.title == "Usage" else EXIT_FAILURE
    except (KeyboardInterrupt, typer.Abort):
        _say("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_FAILURE
    except Exception as exc:  # the last line of defence: one line, not a traceback
        if os.environ.get("JOBGATE_DEBUG"):
            traceback.print_exc()
        detail = " ".join(str(exc).split()) or type(exc).__name__
        _say(f"error: {detail} ({type(exc).__name__}; JOBGATE_DEBUG=1 shows where)")
        return EXIT_FAILURE
    finally:
        _close_clients()
    return result if isinstance(result, int) else 0


def main() -> None:
    code = invoke()
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
