"""The import names ``pip install jobgate`` puts into site-packages, and whether another
distribution in the same environment installs one of them too.

jobgate keeps its components as top-level packages (``gateway``, ``workers``, ...: the
layout the repository shows, docs/developing.md "Installed names" says why). Generic
names can collide: a second distribution that ships a top-level ``gateway`` would write
into the same folder, and whichever was installed last wins file by file. ``jobgate up``
asks :func:`collisions` at start and names any such distribution.
"""

from __future__ import annotations

import importlib.metadata
import re

__all__ = ["NAMES", "collisions"]

#: every top-level package of the distribution (pyproject.toml's packages.find include)
NAMES = (
    "appproxy",
    "contract",
    "gateway",
    "jobgate",
    "migrations",
    "plugins",
    "plumbing",
    "workers",
)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def collisions() -> dict[str, list[str]]:
    """Each of :data:`NAMES` that another installed distribution also provides, with
    those distributions (empty when jobgate has its environment to itself)."""
    provided = importlib.metadata.packages_distributions()
    found: dict[str, list[str]] = {}
    for name in NAMES:
        others = sorted({d for d in provided.get(name, []) if _canonical(d) != "jobgate"})
        if others:
            found[name] = others
    return found
