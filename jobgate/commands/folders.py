"""``jobgate folders``: data folders, their files and who may use them (docs/folders.md)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TransferSpeedColumn,
)

from contract.folders import STALE_UPLOAD_S
from jobgate.client import ApiError, segment, segments
from jobgate.commands.common import OutputOpt, client
from jobgate.render import Output, age, err, list_or_json, out, print_json
from jobgate.transfer import Advance, download, plan_upload, upload
from plugins.resources import format_size

app = typer.Typer(
    help="Data folders: storage that outlives sessions, mounted by name.", no_args_is_help=True
)

EXIT_CANCELLED = 130
FolderArg = Annotated[str, typer.Argument(help="The folder's name (or id).")]


class Usage(StrEnum):
    general = "general"
    model = "model"
    data = "data"


class Perm(StrEnum):
    ro = "ro"
    rw = "rw"
    wd = "wd"


def _fields(f: dict[str, Any]) -> dict[str, str]:
    fields = {
        "id": f["id"],
        "name": f["name"],
        "owner": f["owner"],
        "usage": f["usage"],
        "permission": f["permission"],
        "automount": "yes" if f["automount"] else "no",
        "created": age(f["created_at"]),
    }
    if f.get("trashed_at"):
        fields["trashed"] = age(f["trashed_at"])
    if f.get("size") is not None:
        fields["size"] = format_size(int(f["size"]))
    if f.get("shares"):
        fields["shares"] = ", ".join(f"{u}:{p}" for u, p in f["shares"].items())
    if f.get("sessions") is not None:
        fields["sessions"] = ", ".join(f["sessions"]) or "-"
    return fields


def _show(f: dict[str, Any], output: Output) -> None:
    if output == Output.json:
        print_json(f)
        return
    for key, value in _fields(f).items():
        out.print(f"{key:<11} {value}", markup=False)


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="A name; a leading dot mounts it everywhere.")],
    project: Annotated[
        str | None, typer.Option(help="Owned by this project (you must be a member).")
    ] = None,
    usage: Annotated[Usage, typer.Option(help="What it holds.")] = Usage.general,
    output: OutputOpt = Output.table,
) -> None:
    """Create an empty folder."""
    body: dict[str, Any] = {"name": name, "usage": str(usage)}
    if project:
        body["project"] = project
    _show(client().post("/v1/folders", json=body), output)


def _listing(output: Output, trashed: bool) -> None:
    list_or_json(
        client().get("/v1/folders", params={"trashed": trashed})["items"],
        output,
        ["NAME", "OWNER", "USAGE", "PERM", "ID", "CREATED"],
        lambda f: [
            f["name"],
            f["owner"],
            f["usage"],
            f["permission"],
            f["id"],
            age(f["created_at"]),
        ],
    )


@app.command("ls")
def ls(
    folder: Annotated[
        str | None, typer.Argument(help="List this folder's files instead of the folders.")
    ] = None,
    path: Annotated[str, typer.Argument(help="A directory inside the folder.")] = "",
    recursive: Annotated[bool, typer.Option("--recursive", "-R", help="Walk the tree.")] = False,
    trashed: Annotated[bool, typer.Option(help="List the folders in the trash.")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Your folders (yours, your projects', shared with you), or the files of one."""
    if folder is None:
        _listing(output, trashed)
        return
    entries = client().get(
        f"/v1/folders/{segment(folder)}/files", params={"path": path, "recursive": recursive}
    )["items"]
    list_or_json(
        entries,
        output,
        ["TYPE", "SIZE", "PATH"],
        lambda e: [
            e["type"],
            format_size(e["size"]) if e["type"] == "file" else "-",
            escape(e["path"]),
        ],
    )


@app.command("show")
def show(folder: FolderArg, output: OutputOpt = Output.table) -> None:
    """Owner, your permission, size, shares and the live sessions mounting it."""
    _show(client().get(f"/v1/folders/{segment(folder)}"), output)


@app.command("rm")
def rm(folder: FolderArg, output: OutputOpt = Output.table) -> None:
    """Move a folder to the trash (refused while a live session mounts it)."""
    f = client().delete(f"/v1/folders/{segment(folder)}")
    if output == Output.json:
        print_json(f)
    else:
        out.print(f"{f['name']} moved to the trash (`jobgate folders restore {f['id']}`)")


@app.command("restore")
def restore(folder: FolderArg, output: OutputOpt = Output.table) -> None:
    """Take a folder out of the trash."""
    _show(client().post(f"/v1/folders/{segment(folder)}/restore"), output)


@app.command("purge")
def purge(folder: FolderArg, output: OutputOpt = Output.table) -> None:
    """Delete a folder in the trash, and all its files, for good."""
    client().post(f"/v1/folders/{segment(folder)}/purge")
    if output == Output.json:
        print_json({"folder": folder, "purged": True})
    else:
        out.print(f"{folder} purged")


@app.command("share")
def share(
    folder: FolderArg,
    user: Annotated[str, typer.Option(help="The user to share with.")],
    perm: Annotated[Perm, typer.Option(help="ro: read; rw: and write; wd: and delete.")] = Perm.ro,
    output: OutputOpt = Output.table,
) -> None:
    """Let another user use the folder."""
    f = client().request(
        "PUT", f"/v1/folders/{segment(folder)}/shares/{segment(user)}", json={"perm": str(perm)}
    )
    _show(f, output)


@app.command("unshare")
def unshare(
    folder: FolderArg,
    user: Annotated[str, typer.Option(help="The user to take the share from.")],
    output: OutputOpt = Output.table,
) -> None:
    """Take a user's share away."""
    _show(client().delete(f"/v1/folders/{segment(folder)}/shares/{segment(user)}"), output)


@contextmanager
def _bar(total: int, quiet: bool) -> Iterator[Advance]:
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=err,
        transient=True,
        disable=quiet,
    )
    with progress:
        task = progress.add_task("transfer", total=total)
        yield lambda n: progress.advance(task, n)


@app.command("put")
def put(
    folder: FolderArg,
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Local files and directories, then optionally the REMOTE directory in the "
            "folder (the last argument, when there are several and it is not a local path)."
        ),
    ],
    output: OutputOpt = Output.table,
) -> None:
    """Upload files and directories (streamed, resumed after a dropped connection)."""
    api = client()
    api.get(f"/v1/folders/{segment(folder)}")  # an unknown folder before any local work
    remote = ""
    if len(paths) > 1 and not Path(paths[-1]).exists():
        remote = paths.pop()
    items, skipped = plan_upload([Path(p) for p in paths], remote)
    total = sum(i.size for i in items)
    for link in skipped:
        err.print(f"jobgate: skipped {link} (links and special files are not sent)", markup=False)
    try:
        with _bar(total, output == Output.json) as advance:
            for item in items:
                if item.is_dir:
                    api.post(f"/v1/folders/{segment(folder)}/mkdir", json={"path": item.remote})
                else:
                    upload(api, folder, item, advance)
    except KeyboardInterrupt:
        err.print(
            f"jobgate: interrupted; the gateway keeps what arrived for "
            f"{STALE_UPLOAD_S / 3600:g} h: run the same `jobgate folders put` again "
            "to send only the rest",
            markup=False,
        )
        raise typer.Exit(EXIT_CANCELLED) from None
    files = [i for i in items if not i.is_dir]
    if output == Output.json:
        print_json({"folder": folder, "files": [i.remote for i in files], "bytes": total})
    else:
        out.print(f"{len(files)} file(s), {format_size(total)} to {folder}")


@app.command("get")
def get(
    folder: FolderArg,
    remote: Annotated[str, typer.Argument(help="A file or directory in the folder.")],
    local: Annotated[
        Path | None, typer.Argument(help="Where to write (default: its name, here).")
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Download a file or a directory tree (streamed, resumed after a dropped connection)."""
    api = client()
    entries = api.get(
        f"/v1/folders/{segment(folder)}/files", params={"path": remote, "recursive": True}
    )["items"]
    clean = remote.strip("/")
    if (
        len(entries) == 1
        and entries[0]["path"] == clean
        and entries[0]["type"] not in ("file", "dir")
    ):
        kind = "symbolic link" if entries[0]["type"] == "symlink" else "special file"
        raise ApiError(422, "Invalid", f"{remote!r} is a {kind}; links are never followed")
    single = len(entries) == 1 and entries[0]["path"] == clean and entries[0]["type"] == "file"
    base = posixpath.basename(clean) or folder
    if single:
        target = local or Path(base)
        if target.is_dir():
            target = target / base
        plan = [(entries[0], target)]
    else:
        top = local if local is not None and not local.exists() else (local or Path()) / base
        top.mkdir(parents=True, exist_ok=True)
        plan = []
        for e in entries:
            rel = e["path"][len(clean) :].lstrip("/") if clean else e["path"]
            if e["type"] == "dir":
                (top / rel).mkdir(parents=True, exist_ok=True)
            elif e["type"] == "file":
                plan.append((e, top / rel))
    total = sum(int(e["size"]) for e, _ in plan)
    with _bar(total, output == Output.json) as advance:
        for e, target in plan:
            target.parent.mkdir(parents=True, exist_ok=True)
            download(api, folder, e["path"], target, advance)
    if output == Output.json:
        print_json({"folder": folder, "files": [str(t) for _, t in plan], "bytes": total})
    else:
        out.print(f"{len(plan)} file(s), {format_size(total)} from {folder}")


@app.command("rm-path")
def rm_path(
    folder: FolderArg,
    path: Annotated[str, typer.Argument(help="A file, link or directory in the folder.")],
    output: OutputOpt = Output.table,
) -> None:
    """Delete a file or a directory tree inside a folder (needs wd)."""
    client().delete(f"/v1/folders/{segment(folder)}/files/{segments(path)}")
    if output == Output.json:
        print_json({"folder": folder, "path": path, "removed": True})
    else:
        out.print(f"{folder}: {path} removed")


@app.command("mv")
def mv(
    folder: FolderArg,
    source: Annotated[str, typer.Argument(help="The path to move.")],
    target: Annotated[str, typer.Argument(help="Its new path (must not exist).")],
    output: OutputOpt = Output.table,
) -> None:
    """Rename a file or directory inside a folder."""
    client().post(f"/v1/folders/{segment(folder)}/move", json={"source": source, "target": target})
    if output == Output.json:
        print_json({"folder": folder, "source": source, "target": target})
    else:
        out.print(f"{folder}: {source} -> {target}")
