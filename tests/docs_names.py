"""The names the docs use, and the names that exist: every ``jobgate …`` command path
and its ``--flags`` written in code (inline code and fenced blocks) of README.md and
docs/*.md, and every ``JOBGATE_*`` variable named anywhere in them.

What exists comes from the code itself: the click tree of the Typer app
(``jobgate.cli.command_tree``), the fields of every ``pydantic-settings`` model (its
``env_prefix`` plus the field name), and the ``JOBGATE_*`` string constants of the
source (``os.environ`` reads, variables set for a job such as ``JOBGATE_PARAM_<NAME>``)
and of the scripts. ``tests/unit/test_docs_names.py`` checks the first against the
second.
"""

from __future__ import annotations

import ast
import importlib
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: the packages and scripts whose code defines or reads settings
SOURCES = (
    "gateway",
    "workers",
    "plugins",
    "appproxy",
    "jobgate",
    "contract",
    "plumbing",
    "scripts",
)

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
_SPAN = re.compile(r"(`+)(.+?)\1")
#: "jobgate" as a command word (or a path to it, ``.venv/bin/jobgate``): not part of
#: another path, a URL, an image, a package name, a user (``runuser -u jobgate``) or an
#: MLflow backend (``mlflow run --backend jobgate``)
_COMMAND = re.compile(r"(?:(?<![\w.\-\[@:/])|(?<=bin/))(?<!--backend )(?<!-u )jobgate(?=[ \t]+\S)")
_OPTION = re.compile(r"^(--?[A-Za-z][\w-]*)")
_WORD = re.compile(r"^[a-z][a-z0-9-]*$")
_VARIABLE = re.compile(r"\bJOBGATE_[A-Z0-9_]*(\*|<)?")
#: shell words after which the command line of `jobgate` is over
_ENDS = ("|", "||", "&&", ";", "&", ")", "`", "#")
#: fenced blocks in these languages hold no shell command lines
_NOT_SHELL = frozenset({"python", "py", "json", "toml", "javascript", "js", "sql"})


@dataclass(frozen=True)
class Use:
    """One command line: where, and its words from ``jobgate`` on."""

    path: Path
    line: int
    words: tuple[str, ...]

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {' '.join(self.words)}"


def doc_files() -> list[Path]:
    """README.md and every page under docs/ (new pages are picked up)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


# ---- what the docs name ------------------------------------------------------------
def code_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every piece of code: fenced lines (shell-like blocks, with
    backslash continuations joined) and inline code spans (a span may wrap onto the next
    line of its paragraph)."""
    lines = text.splitlines()
    fence: str | None = None
    shell = True
    paragraph: list[tuple[int, str]] = []
    for number, line in _joined(lines):
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence, shell = opened.group(1), opened.group(2).lower() not in _NOT_SHELL
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is not None:
            if shell:
                yield number, line
            continue
        if fence is None and line.strip() and not opened:
            paragraph.append((number, line))
            continue
        yield from _spans(paragraph)
        paragraph = []
    yield from _spans(paragraph)


def _joined(lines: list[str]) -> Iterator[tuple[int, str]]:
    """Lines with a trailing backslash joined to the next one (shell continuations)."""
    i = 0
    while i < len(lines):
        start, line = i, lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        yield start + 1, line
        i += 1


def _spans(paragraph: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    if not paragraph:
        return
    text = " ".join(line.strip() for _, line in paragraph)
    for span in _SPAN.finditer(text):
        yield paragraph[0][0], span.group(2)


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=False)
    except ValueError:  # an unclosed quote (a span cut mid-command): plain words
        return text.split()


def command_uses(path: Path) -> list[Use]:
    """Every ``jobgate …`` command line written in the code of *path*."""
    uses = []
    for number, line in code_lines(path.read_text()):
        for found in _COMMAND.finditer(line):
            words: list[str] = []
            for word in _split(line[found.start() :]):
                if word in _ENDS or word.startswith(("|", ";", "&", ">", "<", "2>", "`")):
                    break
                words.append(word)
            uses.append(Use(path, number, tuple(words)))
    return uses


def variables(path: Path) -> list[str]:
    """Every ``JOBGATE_*`` name in *path*; a name written as ``JOBGATE_CLUSTER_*`` or
    ``JOBGATE_PARAM_<NAME>`` stands for the names that start so (kept with its ``*``)."""
    names = []
    for found in _VARIABLE.finditer(path.read_text()):
        name = found.group(0)
        names.append(name[:-1] + "*" if name.endswith("<") else name)
    return names


# ---- what exists -----------------------------------------------------------------
def command_problems(use: Use, root: Any) -> list[str]:
    """What in *use* the click tree *root* has no command or option for."""
    command, path = root, ["jobgate"]
    words = list(use.words[1:])
    problems: list[str] = []
    while words and getattr(command, "commands", None):
        word = words[0].rstrip("),.:`'\"")
        if word.startswith("-"):
            break  # an option of the group (`jobgate --version`)
        if not _WORD.match(word.split("|")[0]):
            return problems  # a placeholder (`jobgate admin …`): the group exists
        for each in word.split("|"):  # `jobgate db backup|restore`
            if each not in command.commands:
                problems.append(f"no command `{' '.join([*path, each])}`")
        if problems:
            return problems
        command = command.commands[word.split("|")[0]]
        path.append(word.split("|")[0])
        words.pop(0)
    options = {"--help"} | {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    for word in words:
        if word == "--":
            break
        option = _OPTION.match(word)
        if option and option.group(1) not in options:
            problems.append(f"`{' '.join(path)}` has no option {option.group(1)}")
    return problems


def settings_variables() -> set[str]:
    """The environment names of every pydantic-settings model in the source packages."""
    from pydantic_settings import BaseSettings

    for package in SOURCES:
        for file in (ROOT / package).rglob("*.py"):
            if "BaseSettings" in file.read_text():
                module = ".".join(file.relative_to(ROOT).with_suffix("").parts)
                importlib.import_module(module.removesuffix(".__init__"))
    names: set[str] = set()
    stack: list[type[BaseSettings]] = [BaseSettings]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        prefix = str(cls.model_config.get("env_prefix") or "")
        for name, field in cls.model_fields.items():
            aliases = [a for a in (field.alias, field.validation_alias) if isinstance(a, str)]
            names.update(a.upper() for a in aliases)
            names.add((prefix + name).upper())
    return {n for n in names if n.startswith("JOBGATE_")}


def _python_constants(file: Path) -> Iterator[str]:
    """The string constants of a Python file, its docstrings aside."""
    tree = ast.parse(file.read_text())
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        constant = isinstance(node, ast.Constant) and id(node) not in docstrings
        if constant and isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def code_variables() -> set[str]:
    """``JOBGATE_*`` names the code reads or sets: string constants (docstrings aside) of
    the source packages and the test support modules (the e2e harnesses too), the words
    of the scripts, the Containerfile and compose.yaml, and the settings models' fields."""
    found: set[str] = set()
    files = [f for p in SOURCES for f in (ROOT / p).rglob("*") if f.is_file()]
    files += [ROOT / "Containerfile", ROOT / "compose.yaml", *(ROOT / "tests").glob("*.py")]
    files += sorted((ROOT / "tests" / "e2e").glob("*_harness.py"))
    for file in files:
        if file.suffix == ".py" and file.name != "docs_names.py":
            texts = list(_python_constants(file))
        elif file.suffix in ("", ".sh", ".yaml", ".yml", ".service", ".toml", ".js"):
            texts = [file.read_text(errors="replace")]
        else:
            continue
        for text in texts:
            found.update(re.findall(r"JOBGATE_[A-Z0-9_]*", text))
        if file.suffix == ".py" and "JOBGATE_" in texts:  # f"JOBGATE_{key}" for its keys
            found.update(f"JOBGATE_{t}" for t in texts if re.fullmatch(r"[A-Z][A-Z0-9_]*", t))
    return found | settings_variables()


def variable_exists(name: str, known: set[str]) -> bool:
    """*name* is read or set by the code: itself, or one the code makes from a prefix
    (``JOBGATE_PARAM_`` + a parameter); ``NAME_*`` stands for some name that starts so."""
    if name.endswith("*"):
        return any(k.startswith(name[:-1]) for k in known)
    prefixes = [k for k in known if k.endswith("_") and k != "JOBGATE_"]
    return name in known or any(name.startswith(p) for p in prefixes)
