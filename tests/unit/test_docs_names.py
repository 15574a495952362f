"""Every ``jobgate …`` command, ``--flag`` and ``JOBGATE_*`` variable that README.md and
docs/*.md name exists: the commands and flags in the CLI's click tree, the variables in
the settings models or the code (``tests/docs_names.py`` says how each is found). And
the other way round for the CLI's own README: its command tree shows every command and
option the app has.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from cli_tree import Leaf, leaves
from docs_names import (
    code_variables,
    command_problems,
    command_uses,
    doc_files,
    variable_exists,
    variables,
)

from jobgate.cli import command_tree

DOCS = doc_files()


@pytest.fixture(scope="module")
def tree() -> Any:
    return command_tree()


@pytest.fixture(scope="module")
def known() -> set[str]:
    return code_variables()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_command_and_flag_the_docs_name_exists(doc: Path, tree: Any) -> None:
    problems = [
        f"{use.where()}: {problem}"
        for use in command_uses(doc)
        for problem in command_problems(use, tree)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_variable_the_docs_name_exists(doc: Path, known: set[str]) -> None:
    missing = sorted({name for name in variables(doc) if not variable_exists(name, known)})
    assert not missing, f"{doc.name} names variables nothing reads or sets: {missing}"


def test_the_readme_and_every_docs_page_are_read() -> None:
    names = {p.name for p in DOCS}
    assert {"README.md", "operations.md", "performance.md"} <= names
    uses = {use.words[:2] for use in command_uses(DOCS[0])}
    assert {("jobgate", "up"), ("jobgate", "run")} <= uses


def test_a_name_that_does_not_exist_is_caught(tmp_path: Path, tree: Any, known: set[str]) -> None:
    doc = tmp_path / "wrong.md"
    doc.write_text(
        "Run `jobgate sessions frobnicate ID`, then `jobgate run --no-such-flag -- true`\n"
        "with `JOBGATE_NO_SUCH_SETTING=1` and `JOBGATE_NOPE_*`.\n\n"
        "```console\n$ jobgate db backup|vacuum x.db\n"
        "$ jobgate nodes ls -o json | jq --raw-output '.[0]'\n```\n\n"
        "```sh\nfind /var/backups/jobgate -name x; runuser -u jobgate -- podman ps\n```\n"
    )
    problems = [p for use in command_uses(doc) for p in command_problems(use, tree)]
    assert problems == [
        "no command `jobgate sessions frobnicate`",
        "`jobgate run` has no option --no-such-flag",
        "no command `jobgate db vacuum`",
    ]
    assert [n for n in variables(doc) if not variable_exists(n, known)] == [
        "JOBGATE_NO_SUCH_SETTING",
        "JOBGATE_NOPE_*",
    ]


def test_names_the_code_makes_or_reads_are_found(known: set[str]) -> None:
    assert "JOBGATE_IDLE_TIMEOUT_S" in known  # a settings field (env_prefix + name)
    assert variable_exists("JOBGATE_PARAM_WHO", known)  # "JOBGATE_PARAM_" + a parameter
    assert variable_exists("JOBGATE_CLUSTER_HOSTS", known)  # f"JOBGATE_{key}" of a dict
    assert variable_exists("JOBGATE_CLUSTER_*", known)


def _tree_sections() -> dict[str, str]:
    """jobgate/README.md's command tree, cut at each top-level command."""
    text = (Path(__file__).resolve().parents[2] / "jobgate" / "README.md").read_text()
    tree = text.split("```\njobgate [", 1)[1].split("```", 1)[0]
    sections: dict[str, str] = {}
    name = ""
    for line in tree.splitlines():
        top = re.match(r"^[├└]── ([a-z][a-z-]*)", line)
        if top:
            name = top.group(1)
        if name:
            sections[name] = sections.get(name, "") + line + "\n"
    return sections


@pytest.mark.parametrize("leaf", leaves(), ids=lambda leaf: leaf.name)
def test_the_cli_readme_tree_has_every_command_and_option(leaf: Leaf) -> None:
    section = _tree_sections().get(leaf.path[0], "")
    assert section, f"jobgate/README.md's tree has no `{leaf.path[0]}`"
    words = set(re.findall(r"[a-z][a-z0-9-]*", section))
    assert set(leaf.path) <= words, f"the tree's `{leaf.path[0]}` lacks `{leaf.name}`"
    for param in leaf.params():
        opts = [*param.opts, *param.secondary_opts]
        if param.param_type_name != "option" or "--output" in opts:
            continue
        found = [o for o in opts if re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", section)]
        assert found, f"the tree's `{leaf.name}` lacks {'/'.join(opts)}"
