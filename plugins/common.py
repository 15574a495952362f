"""Small value types shared by several plugin contracts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["EGRESS_MODES", "EgressMode", "Mount", "egress_modes"]

#: where a session may connect (docs/security.md, Egress): ``open``, anything its node
#: reaches; ``no-private``, no loopback, link-local, private (RFC 1918, ULA) or node
#: address except its group's ``egress_allow``; ``none``, no outbound connection. A
#: resource group says which (the scheduler's configuration), a runtime which it enforces.
EgressMode = Literal["open", "no-private", "none"]
EGRESS_MODES: Final[tuple[EgressMode, ...]] = ("open", "no-private", "none")


def egress_modes(stored: str | None) -> frozenset[str]:
    """The egress modes a node keeps its sessions to, from its row (``"open,none"``);
    a node that never said (an older worker) enforces nothing: ``open`` only."""
    return frozenset(m for m in (stored or "open").split(",") if m) | {"open"}


@dataclass(frozen=True, slots=True)
class Mount:
    """A host path made visible inside a session (a bind mount or a device's library dir)."""

    source: str
    target: str
    read_only: bool = False

    def to_json(self) -> dict[str, object]:
        return {"source": self.source, "target": self.target, "read_only": self.read_only}

    @classmethod
    def from_json(cls, raw: dict[str, object]) -> Mount:
        return cls(str(raw["source"]), str(raw["target"]), bool(raw.get("read_only", False)))
