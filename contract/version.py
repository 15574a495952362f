"""jobgate's version, read once from the installed distribution's metadata.

Every process reports the same string: the gateway in its OpenAPI document and
``/v1/health``, workers in their heartbeats, the CLI in ``jobgate --version``. A plain
source checkout (nothing installed, as the scheduler's registry test runs) reports
``0+unknown`` rather than failing.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Final

__all__ = ["VERSION"]


def _read() -> str:
    try:
        return version("jobgate")
    except PackageNotFoundError:
        return "0+unknown"


VERSION: Final = _read()
