"""One rule for a test whose service, image or tool is not there.

Run by ``./scripts/test.sh`` (which sets ``JOBGATE_TEST_REQUIRE_ALL=1``) a missing piece
fails the test; run by hand, the test is skipped with the reason.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(why: str) -> NoReturn:
    """Fail (under ./scripts/test.sh) or skip (by hand) for something that is not there."""
    if os.environ.get("JOBGATE_TEST_REQUIRE_ALL") == "1":
        pytest.fail(f"{why} (./scripts/test.sh should have provided it)")
    pytest.skip(why)
