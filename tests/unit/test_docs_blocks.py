"""The docs' console blocks are read the way tests/e2e/test_docs_run.py runs them."""

from __future__ import annotations

import subprocess
from pathlib import Path

from docs_blocks import console_blocks, script, split_output

DOC = r"""# Title

```console
$ echo one   # a comment
one
$ false
$ echo $?
1
$ cat > f.toml <<'END'
[a]
x = 1
END
$ JOBGATE_MOCK_DEVICES=$PWD/f.toml jobgate up
$ printf '%s\n' \
    two
two
...
```

<!-- docs-test: skip: shows a thing -->
```console
$ rm -rf /
```

1. A step:

   <!-- docs-test: podman -->
   ```console
   $ echo indented
   indented
   ```
"""


def _doc(tmp_path: Path) -> Path:
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    return doc


def test_blocks_commands_markers_and_lines(tmp_path: Path) -> None:
    first, skipped, indented = console_blocks(_doc(tmp_path))
    assert (first.name, first.mode) == ("doc.md:3", "run")
    assert [c.line for c in first.commands] == [4, 6, 7, 9, 13, 14]
    assert first.commands[0].expected == ["one"]
    assert first.commands[3].text.endswith("x = 1\nEND")
    assert first.commands[4].is_up
    assert first.commands[5].expected == ["two", "..."]
    assert (skipped.mode, skipped.reason) == ("skip", "shows a thing")
    assert (indented.mode, indented.commands[0].text, indented.commands[0].expected) == (
        "podman",
        "echo indented",
        ["indented"],
    )


def test_the_script_keeps_exit_codes_and_separates_outputs(tmp_path: Path) -> None:
    block = console_blocks(_doc(tmp_path))[0]
    ran = subprocess.run(
        ["bash", "-c", script(block)], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    outputs = split_output(ran.stdout, len(block.commands))
    assert [rc for _, rc in outputs] == [0, 1, 0, 0, 0, 0]
    assert outputs[0][0].strip() == "one"
    assert outputs[2][0].strip() == "1"  # `echo $?` sees the command before it
    assert (tmp_path / "f.toml").read_text() == "[a]\nx = 1\n"
    assert outputs[5][0].strip() == "two"
