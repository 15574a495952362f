"""What the worker remembers about its kernels across restarts (one JSON file each).

The runtime knows which containers exist; this file adds what only the worker knows:
the byte offsets of output the gateway already holds, whether a stop was requested
(an exit after a stop is a TERMINATED session, not a FAILED one), the allocation the
kernel was given, and its start job (a worker killed before the container existed
starts it again: it never ran). A kernel that ended leaves a tombstone holding its
last event, sent again with the next registration (a worker killed before Redis took
the event would otherwise leave its session running for ever). A sim host keeps this
in memory only.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["KernelState", "StateStore", "attempt_ref", "parse_ref"]


def attempt_ref(kernel_id: str, attempt: int) -> str:
    """The name of one attempt of a kernel on this node: its container, state file and
    tombstone (attempt 1 keeps the bare kernel id, so older containers still match)."""
    return kernel_id if attempt <= 1 else f"{kernel_id}.a{attempt}"


def parse_ref(ref: str) -> tuple[str, int]:
    """(kernel id, attempt) of an :func:`attempt_ref`."""
    kernel_id, sep, number = ref.rpartition(".a")
    if sep and number.isdigit():
        return kernel_id, int(number)
    return ref, 1


@dataclass
class KernelState:
    kernel_id: str
    session_id: str
    node_id: str
    phase: str = "preparing"  # preparing | running
    requested_stop: bool = False
    offsets: dict[str, int] = field(default_factory=dict)
    devices: dict[str, dict[str, str]] = field(default_factory=dict)
    cpuset: list[int] | None = None
    attempt: int = 1
    #: the StartKernel job as JSON (empty in files of older workers)
    job: dict[str, Any] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        return attempt_ref(self.kernel_id, self.attempt)


class StateStore:
    """Kernel state files, and tombstones of kernels that already ran here.

    A start job can be delivered again after its kernel ended (queues deliver at least
    once); the tombstone makes the worker ignore it instead of running the job twice.
    Tombstones are kept for ``TOMBSTONE_TTL_S``. Files and tombstones are named by the
    attempt (:func:`attempt_ref`): a kernel placed here again after a node loss is a new
    attempt, not a repeat.
    """

    TOMBSTONE_TTL_S = 7 * 24 * 3600

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._done: set[str] = set()
        if directory is not None:
            (directory / "done").mkdir(parents=True, exist_ok=True)
            self._prune()

    def _prune(self) -> None:
        assert self.directory is not None
        cutoff = time.time() - self.TOMBSTONE_TTL_S
        for path in (self.directory / "done").iterdir():
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                else:
                    self._done.add(path.name)
            except OSError:
                continue

    def mark_done(self, kernel_id: str, ending: str = "") -> None:
        """Remember that the attempt ran here; *ending* is its last event (JSON)."""
        self._done.add(kernel_id)
        if self.directory is not None:
            (self.directory / "done" / kernel_id).write_text(ending)

    def recent_endings(self, max_age_s: float) -> list[str]:
        """The last events (JSON) of the attempts that ended here in the last seconds."""
        if self.directory is None:
            return []
        cutoff = time.time() - max_age_s
        out = []
        for path in (self.directory / "done").iterdir():
            try:
                if path.stat().st_mtime >= cutoff and (text := path.read_text()):
                    out.append(text)
            except OSError:
                continue
        return out

    def forget(self, kernel_id: str) -> None:
        """Drop the tombstone: the attempt may run here after all."""
        self._done.discard(kernel_id)
        if self.directory is not None:
            (self.directory / "done" / kernel_id).unlink(missing_ok=True)

    def is_done(self, kernel_id: str) -> bool:
        return kernel_id in self._done

    def _path(self, kernel_id: str) -> Path:
        assert self.directory is not None
        return self.directory / f"{kernel_id}.json"

    def save(self, state: KernelState) -> None:
        if self.directory is None:
            return
        path = self._path(state.ref)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state)))
        os.replace(tmp, path)

    def delete(self, ref: str, ending: str = "") -> None:
        """Forget a kernel attempt that ended (leaving its tombstone, with *ending*)."""
        self.mark_done(ref, ending)
        if self.directory is not None:
            self._path(ref).unlink(missing_ok=True)

    def load_all(self) -> dict[str, KernelState]:
        if self.directory is None:
            return {}
        out = {}
        for path in self.directory.glob("*.json"):
            try:
                state = KernelState(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                path.unlink(missing_ok=True)
                continue
            out[state.ref] = state
        return out
