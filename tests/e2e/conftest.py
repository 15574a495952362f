"""Fixtures the end-to-end tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from up_harness import UpStack


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpStack]:
    """A `jobgate up` of one test's own (modules that share one define their own)."""
    stack = UpStack(tmp_path)
    stack.start()
    try:
        yield stack
    finally:
        stack.close()
