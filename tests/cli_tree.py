"""Every command of the ``jobgate`` CLI, found by walking its click command tree (so a
new command is covered by the tests that use this without anyone listing it), and a way
to run one in this process with its exit code, stdout and stderr.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from jobgate.cli import command_tree, invoke

__all__ = ["COMPONENTS", "Leaf", "Result", "leaves", "run_cli"]

#: commands that start a component, use the database or write local files rather than
#: call the API
COMPONENTS = frozenset(
    {
        "up",
        "gateway serve",
        "scheduler run",
        "worker run",
        "proxy serve",
        "db upgrade",
        "admin bootstrap",
        "admin blobs gc",
        "admin secrets rekey",
        "db backup",
        "db restore",
        "service install",
    }
)


#: the names click gives its number parameter types (Typer vendors its own click, so the
#: classes are not click's)
NUMBER_TYPES = frozenset({"integer", "float", "integer range", "float range"})


@dataclass(frozen=True)
class Leaf:
    path: tuple[str, ...]
    command: Any

    @property
    def name(self) -> str:
        return " ".join(self.path)

    @property
    def is_client(self) -> bool:
        return self.name not in COMPONENTS

    def params(self) -> list[Any]:
        return [p for p in self.command.params if p.name not in ("help",)]

    def required(self, value: str) -> list[str]:
        """The command line with every required argument and option given *value* (a
        number where the parameter takes one, the first choice where it takes choices)."""
        args: list[str] = []
        for p in self.params():
            if not p.required:
                continue
            if p.type.name in NUMBER_TYPES:
                given = "1"
            elif "|" in (p.metavar or ""):
                given = p.metavar.split("|")[0]
            else:
                given = value
            if p.param_type_name == "argument":
                args.append(given)
            else:
                args += [max(p.opts, key=len), given]
        return list(self.path) + args

    def typed_options(self) -> list[str]:
        """Options that take a number or one of some choices (a wrong value is refused)."""
        found = []
        for p in self.params():
            if p.param_type_name != "option" or getattr(p, "is_flag", False):
                continue
            if p.metavar == "N" or "|" in (p.metavar or ""):
                found.append(max(p.opts, key=len))
        return found


def leaves() -> list[Leaf]:
    found: list[Leaf] = []

    def walk(command: Any, path: tuple[str, ...]) -> Iterator[None]:
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, (*path, name))
        else:
            found.append(Leaf(path, command))
            yield None

    list(walk(command_tree(), ()))
    return found


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def one_line_error(self) -> str:
        """The one line of stderr, which must start with ``error:``."""
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, self.err
        assert lines[0].startswith("error: "), self.err
        assert "Traceback" not in self.out + self.err
        return lines[0]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    capsys.readouterr()
    code = invoke(list(args))
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)
