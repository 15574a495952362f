"""``jobgate usage``: what ran, in slot-hours, by user, project or group, per hour, day or
week (GET /v1/usage; docs/usage.md); ``jobgate usage shares``: each project's share,
decayed usage and fair-share factor (GET /v1/usage/shares; docs/fair-share.md);
``jobgate usage budgets``: the budgets that apply to the caller (GET /v1/budgets)."""

from __future__ import annotations

import csv
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer

from jobgate.commands.common import OutputOpt, client
from jobgate.render import BUDGET_COLUMNS, Output, budget_rows, print_json, table

#: slots the API counts in byte-seconds are shown in GiB-hours (the rest in amount-hours)
_GIB = 2**30


class By(StrEnum):
    user = "user"
    project = "project"
    group = "group"


class Granularity(StrEnum):
    hour = "hour"
    day = "day"
    week = "week"


app = typer.Typer(
    invoke_without_command=True,
    no_args_is_help=False,
)


@app.callback(invoke_without_command=True)
def usage(
    ctx: typer.Context,
    by: Annotated[By, typer.Option("--by", help="Sum by user, project or resource group.")] = (
        By.project
    ),
    granularity: Annotated[
        Granularity, typer.Option("--granularity", "-g", help="One row per hour, day or week.")
    ] = Granularity.day,
    since: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="Start: a date or ISO 8601 time (UTC unless it has an offset). "
            "Default: 24 hours, 7 days or 4 weeks back.",
        ),
    ] = None,
    until: Annotated[
        str | None, typer.Option("--to", help="End, like --from. Default: now.")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="Only this user's sessions (others: admins).")
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", help="Only this project's sessions.")
    ] = None,
    output: OutputOpt = Output.table,
    as_csv: Annotated[
        bool, typer.Option("--csv", help="CSV in the API's units (slot-seconds), for sheets.")
    ] = False,
) -> None:
    """Resources used: cpu-hours, memory GiB-hours and accelerator hours (a 0.5 share for
    an hour is 0.5), of your sessions and your projects' (admins: everyone's). Sessions
    still running count up to now. ``jobgate usage shares``: the fair-share figures."""
    if ctx.invoked_subcommand is not None:
        return
    if as_csv and output == Output.json:
        raise typer.BadParameter("give --csv or -o json, not both", param_hint="--csv")
    params = {"by": by.value, "granularity": granularity.value}
    for name, value in (
        ("from", _instant(since, "--from")),
        ("to", _instant(until, "--to")),
        ("user", user),
        ("project", project),
    ):
        if value is not None:
            params[name] = value
    report: dict[str, Any] = client().get("/v1/usage", params=params)
    if output == Output.json:
        print_json(report)
    elif as_csv:
        _csv(report)
    else:
        _table(report)


def _instant(value: str | None, option: str) -> str | None:
    """A date or date-time as the API's RFC 3339 (a time with no offset is UTC)."""
    if value is None:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not a date or time: 2026-11-23 or 2026-11-23T14:00", param_hint=option
        ) from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).isoformat()


def _slots(report: dict[str, Any]) -> list[str]:
    """cpu, mem, then the others by name."""
    order = {"cpu": 0, "mem": 1}
    return sorted(report["units"], key=lambda s: (order.get(s, 2), s))


def _header(slot: str, unit: str) -> str:
    return f"{slot.upper()} GIB-H" if unit == "byte-seconds" else f"{slot.upper()}-H"


def _hours(seconds: float, unit: str) -> str:
    """Slot-seconds as hours (byte-seconds as GiB-hours), with the digits that matter."""
    value = seconds / 3600 / (_GIB if unit == "byte-seconds" else 1)
    if value >= 100:
        return f"{value:.0f}"
    if 0 < value < 0.00005:
        return "<0.0001"
    return f"{value:.2f}" if value >= 1 else f"{value:.4f}"


def _period(start: str, granularity: str) -> str:
    at = datetime.fromisoformat(start)
    if granularity == "hour":
        return at.strftime("%Y-%m-%d %H:00")
    if granularity == "week":
        year, week, _ = at.isocalendar()
        return f"{year}-W{week:02d}"
    return at.strftime("%Y-%m-%d")


def _table(report: dict[str, Any]) -> None:
    slots = _slots(report)
    units = [report["units"][s] for s in slots]
    rows = [
        [
            _period(b["start"], report["granularity"]),
            b["key"] or "-",
            *[_hours(b["slots"].get(s, 0.0), u) for s, u in zip(slots, units, strict=True)],
        ]
        for b in report["buckets"]
    ]
    if len(rows) > 1:
        total = [sum(b["slots"].get(s, 0.0) for b in report["buckets"]) for s in slots]
        rows.append(["TOTAL", "", *[_hours(v, u) for v, u in zip(total, units, strict=True)]])
    headers = [_header(s, u) for s, u in zip(slots, units, strict=True)]
    table(["PERIOD", report["by"].upper(), *headers], rows)


def _csv(report: dict[str, Any]) -> None:
    slots = _slots(report)
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["start", report["by"], *[f"{s} ({report['units'][s]})" for s in slots]])
    for b in report["buckets"]:
        writer.writerow([b["start"], b["key"] or "", *[b["slots"].get(s, 0.0) for s in slots]])
    sys.stdout.flush()


@app.command("shares")
def shares(
    group: Annotated[
        str, typer.Option("--group", help="The resource group whose fair-share options apply.")
    ] = "default",
    output: OutputOpt = Output.table,
) -> None:
    """Each project's share, decayed usage and factor, as the fair share sequencer sees them.

    Usage is in billing-unit hours; the factor is 2^(-usage/share): 1 unused, 0.5 at its
    share, less above it (docs/fair-share.md)."""
    found: dict[str, Any] = client().get("/v1/usage/shares", params={"group": group})
    if output == Output.json:
        print_json(found)
        return
    rows = [
        [
            p["project"] or "-",
            f"{p['share']:g}",
            f"{p['normalized_share']:.3f}",
            f"{p['usage'] / 3600:.2f}",
            f"{p['normalized_usage']:.3f}",
            f"{p['factor']:.3f}",
        ]
        for p in found["projects"]
    ]
    table(["PROJECT", "SHARE", "NORM SHARE", "USAGE (UNIT-H)", "NORM USAGE", "FACTOR"], rows)
    if not found["in_effect"]:
        print(
            f"(group {found['group']} does not use the fair-share sequencer: "
            "figures with its default options)",
            file=sys.stderr,
        )


@app.command("budgets")
def budgets(output: OutputOpt = Output.table) -> None:
    """The budgets that apply to you: your own and your projects' (admins: all), with what
    each spent this period and, when spent, until when new sessions wait
    (docs/fair-share.md, Budgets)."""
    found: list[dict[str, Any]] = client().get("/v1/budgets")
    if output == Output.json:
        print_json(found)
        return
    table(BUDGET_COLUMNS, budget_rows(found))
