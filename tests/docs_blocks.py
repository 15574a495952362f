"""The ``console`` blocks of README.md and docs/*.md, as commands a test can run.

Conventions (also in docs/developing.md, "The docs are tested"):

* a line ``$ command`` is a command; a trailing ``\\`` continues it on the next line, and
  a here-document (``<<'EOF'``) runs to its terminator line;
* other lines are output the command prints: each must appear among the lines it
  printed (stdout and stderr together, in any order); ``...`` stands for anything;
* a command that exits non-zero fails the block, unless the next command is ``echo $?``
  and shows the code;
* the default addresses ``127.0.0.1:8420`` and ``127.0.0.1:8421`` stand for the
  gateway and proxy of the stack under test;
* ``jobgate up`` (with or without ``VAR=value`` in front) is the stack the test started
  itself: it is not run again;
* a block preceded by ``<!-- docs-test: podman -->`` runs only against the Podman stack;
  one preceded by ``<!-- docs-test: skip: REASON -->`` is illustrative and never runs.
  Keep that second set small: every block a reader can paste should run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Block", "Command", "console_blocks", "script", "split_output"]

_MARKER = re.compile(r"<!--\s*docs-test:\s*(skip|podman)\s*(?::\s*(.*?))?\s*-->")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
_UP = re.compile(r"^(\w+=\S*\s+)*jobgate up\b")
_TAG = "@@docs-test"


@dataclass
class Command:
    text: str
    line: int  # 1-based line of the ``$`` in the file
    expected: list[str] = field(default_factory=list)

    @property
    def is_up(self) -> bool:
        return bool(_UP.match(self.text))


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    mode: str  # "run" | "podman" | "skip"
    reason: str
    commands: list[Command]

    @property
    def name(self) -> str:
        return f"{self.path.name}:{self.line}"


def console_blocks(path: Path) -> list[Block]:
    """Every ```console block of *path*, with its marker and commands."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped.startswith("```console"):
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        mode, reason = _marker(lines, i)
        start = i + 1
        i += 1
        commands: list[Command] = []
        while i < len(lines) and lines[i].strip() != "```":
            text = lines[i][indent:] if lines[i][:indent].isspace() else lines[i].lstrip()
            if text.startswith("$ "):
                command = Command(text[2:], i + 1)
                while command.text.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    command.text += "\n" + lines[i][indent:]
                heredoc = _HEREDOC.search(command.text)
                if heredoc:
                    end = heredoc.group(2)
                    while i + 1 < len(lines) and lines[i].strip() != end:
                        i += 1
                        command.text += "\n" + lines[i][indent:]
                commands.append(command)
            elif commands and text.strip():
                commands[-1].expected.append(text.rstrip())
            i += 1
        blocks.append(Block(path, start, mode, reason, commands))
        i += 1
    return blocks


def _marker(lines: list[str], fence: int) -> tuple[str, str]:
    j = fence - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    found = _MARKER.search(lines[j]) if j >= 0 else None
    if found is None:
        return "run", ""
    return found.group(1), found.group(2) or ""


def script(block: Block, ports: dict[str, str] | None = None) -> str:
    """A bash script running the block's commands, each one's output between tags;
    *ports* maps the docs' addresses (``127.0.0.1:8420``) to the stack's."""
    ports = ports or {}
    parts = ["set +e", "__rc=0"]
    for n, command in enumerate(block.commands):
        body = ":  # the stack under test is already up" if command.is_up else command.text
        for default, actual in ports.items():
            body = body.replace(default, actual)
        parts.append(
            f"printf '\\n{_TAG} {n} begin\\n'\n(exit $__rc)  # $? of the command before\n"
            f"{{ {body}\n}} 2>&1\n__rc=$?\nprintf '\\n{_TAG} {n} rc %d\\n' $__rc"
        )
    return "\n".join(parts) + "\n"


def split_output(text: str, count: int) -> list[tuple[str, int | None]]:
    """Per command: (what it printed, exit code or None when it never finished)."""
    results: list[tuple[str, int | None]] = []
    for n in range(count):
        begin = f"{_TAG} {n} begin\n"
        if begin not in text:
            results.append(("", None))
            continue
        rest = text.split(begin, 1)[1]
        found = re.search(rf"\n{_TAG} {n} rc (\d+)\n", rest)
        if found is None:
            results.append((rest, None))
        else:
            results.append((rest[: found.start()], int(found.group(1))))
    return results
