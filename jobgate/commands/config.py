"""``jobgate admin config export FILE`` / ``import FILE``: the deployment's settings as a file.

The format and its rules live in :mod:`jobgate.configfile`: resource groups, images,
users (no keys), projects, policies, budgets, identity providers (no client secrets)
and their binding rules; secrets excluded; an import only creates and
updates, and writes nothing the second time. ``-`` is stdout / stdin.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from jobgate.commands.common import OutputOpt, client
from jobgate.render import Output, err, out, print_json

__all__ = ["app"]

app = typer.Typer(
    help="Export and import resource groups, images, users, projects, policies, budgets, "
    "identity providers and binding rules (no secrets).",
    no_args_is_help=True,
)


@app.command("export")
def export_config(
    file: Annotated[str, typer.Argument(help="Where to write it (- for stdout).")],
    output: OutputOpt = Output.table,
) -> None:
    """Write the configuration as JSON (API keys and other secrets are excluded)."""
    from jobgate.configfile import export

    text = json.dumps(export(client()), indent=2, sort_keys=False) + "\n"
    if file == "-":
        sys.stdout.write(text)
        return
    Path(file).write_text(text)
    doc = json.loads(text)
    sizes = {k: len(v) for k, v in doc.items() if isinstance(v, list)}
    if output == Output.json:
        print_json({"file": file, "exported": sizes})
        return
    counts = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sizes.items())
    err.print(f"exported {counts} to {file}")


@app.command("import")
def import_config(
    file: Annotated[str, typer.Argument(help="A file `config export` wrote (- for stdin).")],
    output: OutputOpt = Output.table,
) -> None:
    """Create or update what the file holds; what is already equal is left alone."""
    from jobgate.configfile import ConfigError, import_

    try:
        raw = sys.stdin.read() if file == "-" else Path(file).read_text()
    except OSError as exc:
        err.print(f"[red]error:[/] cannot read {file}: {exc.strerror or exc}")
        raise typer.Exit(1) from None
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        err.print(f"[red]error:[/] {file} is not JSON: {exc}")
        raise typer.Exit(1) from None
    try:
        outcome = import_(client(), doc)
    except ConfigError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    totals = {w: outcome.count(w) for w in ("created", "updated", "unchanged", "skipped")}
    if output == Output.json:
        print_json({"sections": outcome.done, **totals, "notes": outcome.notes})
        return
    nouns = {
        "resource_groups": "resource group",
        "policies": "policy",
        "sso_providers": "identity provider",
        "sso_bindings": "binding rule",
    }
    for section, per in outcome.done.items():
        for what in ("created", "updated", "skipped"):
            for name in per.get(what, []):
                note = " (exists with another role; not changed)" if what == "skipped" else ""
                out.print(f"{what} {nouns.get(section, section[:-1])} {name}{note}")
    for note in outcome.notes:
        out.print(f"note: {note}", markup=False)
    out.print(
        f"{outcome.count('created')} created, {outcome.count('updated')} updated, "
        f"{outcome.count('unchanged')} unchanged, {outcome.count('skipped')} skipped"
    )
