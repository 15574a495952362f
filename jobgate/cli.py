"""The ``jobgate`` command: a thin client over the API, plus the components themselves.

::

    jobgate up                          the whole stack on this machine
    jobgate run [OPTIONS] -- CMD...     run a session, stream it, exit with its code
    jobgate sessions ls|show|logs|rm|create
    jobgate nodes ls|show|drain|cordon|uncordon
    jobgate admin users|projects|policies|groups ...
    jobgate apps ls|open SESSION [APP]        jobgate images ls|add|rm
    jobgate gateway serve | scheduler run | worker run | proxy serve
    jobgate db upgrade|backup|restore   jobgate service install   jobgate admin config

:func:`main` is the one place errors reach the user: every failure is one line on
stderr (``error: …``) and an exit code; a Python traceback never reaches a user.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from contract.version import VERSION
from jobgate.client import ApiError
from jobgate.commands import admin, apps, config, db, endpoints, nodes, serve, service, sessions
from jobgate.commands.common import close_clients
from jobgate.commands.run import run
from jobgate.commands.up import up
from jobgate.render import err

try:  # newer Typer ships its own copy of click; its exceptions are those
    from typer._click import exceptions as clickx
except ImportError:  # pragma: no cover - older Typer, on click itself
    from click import exceptions as clickx  # type: ignore[no-redef]

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "app", "command_tree", "invoke", "main"]

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

app = typer.Typer(
    name="jobgate",
    help="A serverless job gateway for GPU clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
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


app.command("up")(up)
app.command(
    "run",
    context_settings={"allow_interspersed_args": False},
)(run)
app.add_typer(sessions.app, name="sessions")
app.add_typer(endpoints.app, name="endpoints")
app.add_typer(nodes.app, name="nodes")
app.add_typer(apps.apps_app, name="apps")
app.add_typer(apps.images_app, name="images")
app.add_typer(admin.app, name="admin")
admin.app.add_typer(config.app, name="config")
app.add_typer(serve.gateway_app, name="gateway")
app.add_typer(serve.scheduler_app, name="scheduler")
app.add_typer(serve.worker_app, name="worker")
app.add_typer(serve.db_app, name="db")
serve.db_app.command("backup")(db.backup)
serve.db_app.command("restore")(db.restore)
app.add_typer(serve.proxy_app, name="proxy")
app.add_typer(service.app, name="service")


def _usage(exc: clickx.UsageError) -> int:
    if isinstance(exc, clickx.NoArgsIsHelpError):
        exc.show()
        return exc.exit_code
    where = exc.ctx.command_path if exc.ctx is not None else "jobgate"
    message = " ".join(exc.format_message().split()).replace("Value error, ", "")
    err.print(f"error: {message} (see `{where} --help`)", markup=False)
    return EXIT_USAGE


def _metavar(param: Any, ctx: Any) -> str:
    label = str(param.display_type(ctx)) if hasattr(param, "display_type") else ""
    label = label.strip("<>")
    if label.startswith("list[") and label.endswith("]"):
        label = label[5:-1]
    if "|" in label:
        return label  # the choices themselves
    if label.startswith(("int", "float")):
        return "N"
    return str(param.name).upper().replace("_", "-")


def _no_type(ctx: Any) -> str:
    return ""


def command_tree() -> Any:
    """The click command tree of the app, with readable value names in every help text
    (``--cpu CPU``, ``--limit N``, ``--type batch|interactive``; never a type's name)."""
    root = typer.main.get_command(app)
    stack = [root]
    while stack:
        command = stack.pop()
        stack.extend(getattr(command, "commands", {}).values())
        ctx = typer.Context(command)
        for param in command.params:
            if param.metavar is None and not getattr(param, "is_flag", False):
                param.metavar = _metavar(param, ctx)
            if getattr(param, "param_type_name", "") == "argument":
                param.display_type_rich = _no_type  # type: ignore[attr-defined]
    return root


def invoke(args: Sequence[str] | None = None) -> int:
    """Run the CLI with *args* (default: ``sys.argv``); return the exit code."""
    try:
        command = command_tree()
        result = command.main(args=args, prog_name="jobgate", standalone_mode=False)
    except clickx.UsageError as exc:
        return _usage(exc)
    except clickx.ClickException as exc:
        err.print(f"error: {exc.format_message()}", markup=False)
        return exc.exit_code
    except ApiError as exc:
        where = f" ({exc.field})" if exc.field else ""
        err.print(f"error: {exc.detail}{where}", markup=False)
        return EXIT_USAGE if exc.title == "Usage" else EXIT_FAILURE
    except (KeyboardInterrupt, typer.Abort):
        err.print("interrupted", markup=False)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_FAILURE
    except Exception as exc:  # the last line of defence: one line, not a traceback
        if os.environ.get("JOBGATE_DEBUG"):
            traceback.print_exc()
        detail = " ".join(str(exc).split()) or type(exc).__name__
        err.print(
            f"error: {detail} ({type(exc).__name__}; JOBGATE_DEBUG=1 shows where)", markup=False
        )
        return EXIT_FAILURE
    finally:
        close_clients()
    return result if isinstance(result, int) else 0


def main() -> None:
    code = invoke()
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
