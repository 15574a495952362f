"""``jobgate up`` refuses impossible ports in one line before it writes anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_tree import run_cli


@pytest.mark.parametrize(
    ("ports", "line"),
    [
        (
            ["--port", "99999"],
            "error: Invalid value for '--port': 99999 is not in the range 1<=x<=65535. "
            "(see `jobgate up --help`)",
        ),
        (
            ["--proxy-port", "0"],
            "error: Invalid value for '--proxy-port': 0 is not in the range 1<=x<=65535. "
            "(see `jobgate up --help`)",
        ),
        (
            ["--port", "9000", "--proxy-port", "9000"],
            "error: --port and --proxy-port are both 9000; give each its own port",
        ),
    ],
    ids=["too-high", "zero", "the-same"],
)
def test_impossible_ports_are_one_line_and_nothing_is_written(
    ports: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    result = run_cli(capsys, "up", "--data-dir", str(data_dir), "--runtime", "sim", *ports)
    assert result.code == 2
    assert result.one_line_error() == line
    assert result.out == ""
    assert not data_dir.exists()
