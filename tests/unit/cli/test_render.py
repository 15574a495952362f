"""One output style: sizes, times, durations, commands, and tables that fit the terminal,
one line a row, cutting long cells with an ellipsis but never an id or a name."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from jobgate import render
from jobgate.render import (
    Output,
    command_text,
    duration,
    list_or_json,
    slots_text,
    stamp,
    table,
    value_text,
)

ROWS = [
    ["de178ee3", "a-rather-long-session-name", "SUCCEEDED", "exited with code 0 " * 3, "vm", "0"],
    ["006dcfd7", "short", "PENDING", "no node fits: 1 node lacks cpu (largest free 1.5)", "-", "-"],
]
COLUMNS = ["ID", "NAME", "STATUS", "REASON", "NODE", "EXIT"]


#: a failed pull's reason is about 280 characters
PULL = "pulling docker.io/library/nope:1 failed: " + "manifest unknown; " * 13


def _terminal(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    terminal = Console(force_terminal=True, width=width, color_system=None, highlight=False)
    monkeypatch.setattr(render, "out", terminal)


def test_a_table_on_an_80_column_terminal_cuts_long_reasons_and_keeps_names(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _terminal(monkeypatch, 80)
    table(COLUMNS, [*ROWS, ["8f0e1d2c", "puller", "FAILED", PULL, "-", "-"]])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4  # one line a row: nothing wraps
    assert max(len(line) for line in lines) == 80
    assert lines[1].startswith("de178ee3  a-rather-long-session-name  SUCCEEDED  exited")
    assert lines[3].startswith("8f0e1d2c  puller                      FAILED     pulling docker")
    assert lines[3].endswith("…  -     -")  # the reason is cut, the columns after it kept
    assert lines[2].endswith("…  -     -")
    assert all(line == line.rstrip() for line in lines)


def test_ids_and_names_stay_whole_on_a_terminal_too_narrow_for_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _terminal(monkeypatch, 30)
    table(COLUMNS, ROWS)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("de178ee3  a-rather-long-session-name  SUCCEEDED  exite…  ")
    assert lines[0].startswith("ID        NAME                        STATUS     REASON  ")


def test_columns_sets_the_width_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr(render, "out", Console(force_terminal=True, color_system=None))
    table(COLUMNS, [["8f0e1d2c", "puller", "FAILED", PULL, "-", "-"]])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines[0]) == 60  # the header, whose last column is widest
    assert lines[1].endswith("docker.io/lib…  -     -")


def test_a_table_into_a_pipe_is_never_cut(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "60")  # whatever the harness sets
    table(COLUMNS, [*ROWS, ["8f0e1d2c", "puller", "FAILED", PULL, "-", "-"]])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert "no node fits: 1 node lacks cpu (largest free 1.5)" in lines[2]
    assert PULL.strip() in lines[3]
    assert "…" not in "\n".join(lines)


def test_a_list_is_a_table_for_people_and_the_api_answer_for_scripts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = [{"name": "a", "n": 1, "extra": None}, {"name": "bb", "n": 22, "extra": None}]
    list_or_json(found, Output.json, ["NAME", "N"], lambda i: [i["name"], str(i["n"])])
    assert json.loads(capsys.readouterr().out) == found
    list_or_json(found, Output.table, ["NAME", "N"], lambda i: [i["name"], str(i["n"])])
    assert capsys.readouterr().out.splitlines() == ["NAME  N", "a     1", "bb    22"]


def test_values_read_the_same_everywhere() -> None:
    assert stamp("2026-11-25T11:40:03.123456+00:00") == "2026-11-25T11:40:03Z"
    assert stamp("2026-11-25T12:40:03.5+01:00") == "2026-11-25T11:40:03Z"
    assert stamp(None) == "-"
    assert [duration(s) for s in (0.42, 12, 65, 7380, 2 * 86400 + 3600)] == [
        "0.4s",
        "12s",
        "1m05s",
        "2h03m",
        "2d01h",
    ]
    assert slots_text({"cpu": "2", "mem": str(512 * 1024**2), "cuda.shares": "0.5"}) == (
        "cpu=2 mem=512MiB cuda.shares=0.5"
    )
    assert command_text(["sh", "-c", "echo 'hi there'; exit 3"]) == (
        "sh -c 'echo '\"'\"'hi there'\"'\"'; exit 3'"
    )
    assert command_text([]) == "-"
    assert [value_text(v) for v in (None, "", True, False, 0, "x")] == [
        "-",
        "-",
        "yes",
        "no",
        "0",
        "x",
    ]
