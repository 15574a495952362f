"""Find the node's NVIDIA CDI spec and the device names it declares.

``nvidia-ctk cdi generate`` writes a spec of kind ``nvidia.com/gpu`` (YAML or JSON)
under ``/etc/cdi`` or ``/var/run/cdi``; Podman then accepts ``--device
nvidia.com/gpu=<name>`` and injects device nodes, driver libraries and hooks itself.
Depending on ``--device-name-strategy`` the names are UUIDs (``GPU-...``, ``MIG-...``),
indices (``0``, ``0:1`` for MIG) or both. We only need the set of names, so the spec is
scanned for ``name:`` keys rather than parsed with a YAML library; a spec is re-read on
each reservation so a regenerated one is picked up without restarting the worker.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from plugins.accelerators.sysfs import read_text

__all__ = ["CDI_KIND", "CdiSpecs", "scan_cdi"]

CDI_KIND = "nvidia.com/gpu"
_KIND = re.compile(r"""["']?kind["']?\s*:\s*["']?nvidia\.com/gpu["']?(?![\w/.-])""")
# "name" as a key of its own (not hookName, not a substring of another word)
_NAME = re.compile(r"""(?<![\w])["']?name["']?\s*:\s*["']?([A-Za-z0-9][A-Za-z0-9:._-]*)""")
_SUFFIXES = {".json", ".yaml", ".yml"}


@dataclass(frozen=True, slots=True)
class CdiSpecs:
    files: list[Path] = field(default_factory=list)
    names: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.files)


def scan_cdi(dirs: Iterable[Path]) -> CdiSpecs:
    """Every ``nvidia.com/gpu`` spec in *dirs* and the union of their device names."""
    files: list[Path] = []
    names: set[str] = set()
    for directory in dirs:
        try:
            candidates = sorted(p for p in directory.iterdir() if p.suffix in _SUFFIXES)
        except OSError:
            continue
        for path in candidates:
            text = read_text(path)
            if text and _KIND.search(text):
                files.append(path)
                names.update(_NAME.findall(text))
    return CdiSpecs(files, frozenset(names))
