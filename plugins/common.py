"""Small value types shared by several plugin contracts."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Mount"]


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
