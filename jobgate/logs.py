"""Logging for the long-running components (one format, level from JOBGATE_LOG_LEVEL)."""

from __future__ import annotations

import logging
import os

__all__ = ["setup"]


def setup(component: str) -> None:
    level = os.environ.get("JOBGATE_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=level,
        format=f"%(asctime)s %(levelname)s {component} %(name)s: %(message)s",
    )
    for noisy in ("arq.worker", "arq.jobs", "httpx", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
