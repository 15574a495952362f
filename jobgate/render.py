"""Terminal output: tables for people, JSON for scripts (``--output json``)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["Output", "age", "err", "out", "print_json", "short_id", "table"]

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

STATUS_STYLE = {
    "PENDING": "yellow",
    "SCHEDULED": "cyan",
    "PREPARING": "cyan",
    "RUNNING": "green",
    "TERMINATING": "magenta",
    "SUCCEEDED": "bold green",
    "FAILED": "bold red",
    "ERROR": "bold red",
    "CANCELLED": "dim",
    "TERMINATED": "dim",
}


class Output(StrEnum):
    table = "table"
    json = "json"


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def short_id(value: str | None) -> str:
    return (value or "")[:8]


def age(stamp: str | None) -> str:
    if not stamp:
        return "-"
    then = datetime.fromisoformat(stamp)
    seconds = int((datetime.now(UTC) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{max(seconds, 0)}s ago"


def status_text(status: str) -> str:
    style = STATUS_STYLE.get(status, "")
    return f"[{style}]{status}[/]" if style else status


def table(columns: list[str], rows: list[list[str]]) -> None:
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in columns:
        t.add_column(column, overflow="ellipsis", no_wrap=column != "REASON", max_width=60)
    for row in rows:
        t.add_row(*row)
    out.print(t)
