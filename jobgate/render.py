"""Terminal output, one style everywhere a person reads; JSON for scripts (``-o json``).

- sizes are human-readable (``512MiB``), whatever the field;
- times: relative ages in tables (``3m ago``), ISO 8601 to the second in details
  (``2026-11-25T11:40:03Z``), durations where they help (``1m05s``);
- commands are shown quoted as a shell would (``shlex.join``);
- tables: one row per line, fitted to the terminal by cutting long cells (reasons,
  slots) with ``…`` as ``kubectl get`` and ``docker ps`` do; ids and names are never cut;
  into a pipe nothing is cut, as with ``kubectl get``;
- ``-o json`` prints exactly what the API answered: a list for list commands, an object
  for the others, always valid JSON on stdout.

jobgate's own messages go to stderr (``err``); stdout carries only results and, for
``run``/``logs``, the job's own output.
"""

from __future__ import annotations

import io
import json
import shlex
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from plugins.resources import format_size

__all__ = [
    "Output",
    "age",
    "command_text",
    "duration",
    "err",
    "list_or_json",
    "out",
    "print_json",
    "short_id",
    "slots_text",
    "stamp",
    "status_text",
    "table",
    "value_text",
]

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

STATUS_STYLE = {
    "PENDING": "yellow",
    "SCHEDULED": "cyan",
    "PREPARING": "cyan",
    "RUNNING": "green",
    "TERMINATING": "magenta",
    "PREEMPTED": "magenta",
    "SUCCEEDED": "bold green",
    "FAILED": "bold red",
    "ERROR": "bold red",
    "CANCELLED": "dim",
    "TERMINATED": "dim",
}
#: columns whose long cells are cut with ``…`` to fit the terminal; every other column
#: (ids, names, statuses, ages) is kept whole
CUT = frozenset(
    {
        "REASON",
        "FREE",
        "CAPACITY",
        "SCHEDULER",
        "DESCRIPTION",
        "MEMBERS",
        "APPS",
        "MAX SLOTS",
        "TARGET",
    }
)
#: the space between two columns
GAP = 2


class Output(StrEnum):
    table = "table"
    json = "json"


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
    sys.stdout.flush()


def list_or_json(
    found: list[dict[str, Any]],
    output: Output,
    columns: list[str],
    row: Callable[[dict[str, Any]], list[str]],
) -> None:
    """A list command's answer: the API's list as it came (``-o json``), else a table with
    one ``row(item)`` per item."""
    if output == Output.json:
        print_json(found)
        return
    table(columns, [row(item) for item in found])


def short_id(value: str | None) -> str:
    """The first 8 characters of an id (a unique prefix in any real deployment)."""
    return (value or "")[:8]


def _parse(value: str) -> datetime:
    then = datetime.fromisoformat(value)
    return then if then.tzinfo else then.replace(tzinfo=UTC)


def age(value: str | None) -> str:
    """``3m ago`` (tables)."""
    if not value:
        return "-"
    seconds = int((datetime.now(UTC) - _parse(value)).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{max(seconds, 0)}s ago"


def stamp(value: str | None) -> str:
    """``2026-11-25T11:40:03Z`` (details): ISO 8601 in UTC, to the second."""
    if not value:
        return "-"
    return _parse(value).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration(seconds: float | None) -> str:
    """``0.4s``, ``12s``, ``1m05s``, ``2h03m``, ``3d04h``."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{max(seconds, 0):.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def between(start: str | None, end: str | None) -> float | None:
    """Seconds from *start* to *end* (now when *end* is None); None without a start."""
    if not start:
        return None
    until = _parse(end) if end else datetime.now(UTC)
    return (until - _parse(start)).total_seconds()


def command_text(argv: list[str] | None) -> str:
    return shlex.join(argv) if argv else "-"


def _amount(slot: str, value: object) -> str:
    if slot != "mem" and not slot.endswith(".mem") and not slot.endswith("memory"):
        return str(value)
    try:
        return format_size(int(Decimal(str(value))))
    except (InvalidOperation, ValueError):
        return str(value)


def slots_text(values: dict[str, Any] | None) -> str:
    """``cpu=2 mem=4GiB cuda.shares=0.5`` (memory in binary units)."""
    return " ".join(f"{k}={_amount(k, v)}" for k, v in (values or {}).items()) or "-"


def status_text(status: str) -> str:
    style = STATUS_STYLE.get(status, "")
    return f"[{style}]{status}[/]" if style else status


def value_text(value: object) -> str:
    """A field's value for people: ``-`` for none, ``yes``/``no`` for flags (never
    Python's ``None``/``True``)."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(value_text(v) for v in value) or "-"
    return str(value)


def _width() -> int | None:
    """How wide a table may be: on a terminal its width (``COLUMNS`` if set, as rich reads
    it); into a pipe or a file no limit, as ``kubectl get`` does, so scripts, ``grep`` and
    ``less -S`` see every cell whole (``COLUMNS`` alone does not cut a pipe: test
    harnesses and CI set it for other reasons)."""
    return out.width if out.is_terminal else None


def _fit(columns: list[str], cells: list[list[Text]], width: int) -> list[int]:
    """Column widths that fit *width*: the widest long-cell column (:data:`CUT`) gives
    up a character at a time, never below its header; the others are kept whole."""
    widths = [
        max([len(name)] + [row[i].cell_len for row in cells]) for i, name in enumerate(columns)
    ]
    cut = [i for i, name in enumerate(columns) if name in CUT]
    excess = sum(widths) + GAP * (len(columns) - 1) - width
    while excess > 0:
        shrinkable = [i for i in cut if widths[i] > max(len(columns[i]), 3)]
        if not shrinkable:
            break  # ids and names alone are wider than the terminal: they stay whole
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    return widths


def table(columns: list[str], rows: list[list[str]]) -> None:
    """One row per line, columns two spaces apart. Long cells (:data:`CUT`: reasons,
    slots, descriptions) are cut with ``…`` so each line fits the width of
    :func:`_width`; ids, names, statuses and ages are never cut. ``sessions show`` and
    ``-o json`` always give the whole text."""
    cells = [[Text.from_markup(cell) for cell in row] for row in rows]
    width = _width()
    if width is not None:
        widths = _fit(columns, cells, width)
        for row in cells:
            for i, cell in enumerate(row):
                if cell.cell_len > widths[i]:
                    cell.truncate(widths[i], overflow="ellipsis")
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", expand=False)
    for column in columns:
        t.add_column(column, no_wrap=True, min_width=len(column))
    for row in cells:
        t.add_row(*row)
    page = Console(
        file=io.StringIO(),
        width=1_000_000,
        color_system="auto" if out.is_terminal and out.color_system else None,
        force_terminal=out.is_terminal,
        highlight=False,
    )
    page.print(t)
    assert isinstance(page.file, io.StringIO)
    text = "\n".join(line.rstrip() for line in page.file.getvalue().splitlines())
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _kinds(values: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in sorted(values.items())) or "-"


def budget_rows(found: list[dict[str, Any]]) -> list[list[str]]:
    """One row per budget (``GET /v1/budgets``), then one per member sub-limit under it
    (``ml-a/alice``): limits and use in slot-hours per period."""
    rows = []
    for b in found:
        period = f"{b['period']} ({b['window']})"
        members = [(f"{b['subject']}/{m}", h) for m, h in b["members"].items()]
        holders = [(b["subject"], b), *members]
        for name, h in holders:
            rows.append(
                [
                    b["scope"],
                    name,
                    period,
                    _kinds(h["limits"]),
                    _kinds({k: round(v, 2) for k, v in h["used"].items()}),
                    f"{h['percent']:.0f}%",
                    stamp(h["exhausted_until"]),
                ]
            )
    return rows


BUDGET_COLUMNS = ["SCOPE", "SUBJECT", "PERIOD", "LIMIT (H)", "USED (H)", "USED", "SPENT UNTIL"]
