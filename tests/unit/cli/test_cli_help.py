"""What ``--help`` shows a person: every command's help, found by walking the tree, read
as it prints on an 80-column terminal."""

from __future__ import annotations

import re

import pytest
from cli_tree import leaves, run_cli

from jobgate.cli import COMMANDS, PANELS, command_tree

LEAVES = leaves()


def _groups() -> list[tuple[tuple[str, ...], object]]:
    found = []
    stack: list[tuple[tuple[str, ...], object]] = [((), command_tree())]
    while stack:
        path, command = stack.pop()
        subs = getattr(command, "commands", None)
        if subs:
            found.append((path, command))
            stack.extend(((*path, name), sub) for name, sub in subs.items())
    return found


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


def _help(capsys: pytest.CaptureFixture[str], *path: str) -> str:
    result = run_cli(capsys, *path, "--help")
    assert result.code == 0, result
    return result.out


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_top_level_lists_what_users_type_first_then_what_runs_jobgate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = _help(capsys)
    users, _, operators = text.partition(f"\n{PANELS[1]}:\n")
    assert f"\n{PANELS[0]}:\n" in users
    for name in ("up", "run", "sessions", "templates", "triggers", "webhooks"):
        assert re.search(rf"^  {name} ", users, re.M), name
    for name in ("admin", "gateway", "scheduler", "worker", "proxy", "db", "service"):
        assert re.search(rf"^  {name} ", operators, re.M), name
    for entry in COMMANDS.values():  # each description whole, none cut to "..."
        assert _flat(entry.help) in _flat(text)
    assert "..." not in text.partition("Commands:")[2]


@pytest.mark.parametrize("path", [path for path, _ in _groups()], ids=" ".join)
def test_a_group_lists_each_command_with_its_whole_first_sentence(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    text = _flat(_help(capsys, *path).partition("Commands:")[2])
    group = dict(_groups())[path]
    for name, sub in group.commands.items():  # type: ignore[attr-defined]
        first = _flat(sub.get_short_help_str(10_000))
        assert not first.endswith("..."), name
        assert f"{name} {first}" in text, (name, first)


@pytest.mark.parametrize("leaf", LEAVES, ids=lambda leaf: leaf.name)
def test_usage_names_arguments_plainly_and_options_start_with_a_capital(
    leaf: object, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _help(capsys, *leaf.path)  # type: ignore[attr-defined]
    usage = text.split("\n\n")[0]
    assert not set("{}") & set(usage), usage
    for param in leaf.params():  # type: ignore[attr-defined]
        words = getattr(param, "help", None) or ""
        choices = (param.metavar or "").split("|")
        starts_with_a_choice = any(words.startswith(f"{c}:") for c in choices if c)
        assert not words or words[0].isupper() or starts_with_a_choice, (param.name, words)


def test_run_help_states_each_range_once_with_the_defaults_and_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = _flat(_help(capsys, "run"))
    assert text.count("0<=x<=100") == 2  # --priority and --max-retries, once each
    assert "0 to 100" not in text
    assert "--cpu CPU Cores, e.g. 2 or 0.5 (default: 0.5)." in text
    assert "--mem MEM Memory, e.g. 4g or 512m (default: 512MiB)." in text
    assert "1<=x<=64" not in text
    assert "max_cluster_size (16 unless" in text
    assert "143 (SIGTERM) when Ctrl-C stopped it while RUNNING" in text
    assert "130 when Ctrl-C cancelled it while it waited (PENDING)" in text


def test_up_help_reads_like_the_others(capsys: pytest.CaptureFixture[str]) -> None:
    text = _flat(_help(capsys, "up"))
    assert "--port N The gateway's port. [default: 8420; 1<=x<=65535]" in text
    assert "--runtime auto|podman|process|sim auto: podman when" in text
    assert "Running sessions are terminated" in text


def test_a_mistyped_command_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "sesions", "ls")
    assert result.code == 2
    assert result.one_line_error() == (
        "error: No such command 'sesions'. Did you mean 'sessions'? (see `jobgate --help`)"
    )
