"""The overlay's configuration: its members and one forwarder's OverlayConfig, and
OverlayError, what every part raises when the overlay cannot be set up."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any


class OverlayError(RuntimeError):
    """The overlay could not be set up: a forwarder that did not start, a TUN not attached."""


@dataclass(frozen=True, kw_only=True)
class Member:
    """One container of the session: its overlay address and its node's forwarder."""

    index: int
    address: str  # overlay IPv4, e.g. "10.254.0.2"
    node_host: str  # the forwarder of its node: address ...
    node_port: int  # ... and UDP port


@dataclass(frozen=True, kw_only=True)
class OverlayConfig:
    """One forwarder: a session on one node. ``listen_host``/``listen_port`` must be this
    node's address and port exactly as the members name them: members there are local."""

    session_id: str
    key: str = field(repr=False)  # hex of 32 bytes, the session's
    listen_host: str
    listen_port: int
    members: tuple[Member, ...]
    control: str  # unix socket receiving TUN fds
    mtu: int = 1380
    idle_exit_s: float = 120.0

    def __post_init__(self) -> None:
        try:
            key = bytes.fromhex(self.key)
        except ValueError:
            key = b""
        if len(key) != 32:
            raise ValueError("key must be the hex of 32 bytes")
        if not 576 <= self.mtu <= 9000:
            raise ValueError(f"mtu {self.mtu} is not within 576..9000")
        if not 0 < self.listen_port < 65536:
            raise ValueError(f"listen_port {self.listen_port} is not a port")
        if self.idle_exit_s <= 0:
            raise ValueError("idle_exit_s must be positive")
        if not self.members:
            raise ValueError("a session has members")
        seen_index: set[int] = set()
        seen_address: set[str] = set()
        for m in self.members:
            address = ipaddress.ip_address(m.address)  # ValueError names it
            if address.version != 4 or address.is_multicast or address.is_unspecified:
                raise ValueError(f"member {m.index}: {m.address} is not a unicast IPv4")
            if m.index in seen_index or str(address) in seen_address:
                raise ValueError(f"member {m.index} ({m.address}) is listed twice")
            if not 0 <= m.index < 1 << 16:
                raise ValueError(f"member index {m.index} is not within 0..65535")
            if not 0 < m.node_port < 65536:
                raise ValueError(f"member {m.index}: node_port {m.node_port} is not a port")
            seen_index.add(m.index)
            seen_address.add(str(address))

    @property
    def key_bytes(self) -> bytes:
        return bytes.fromhex(self.key)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OverlayConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown config fields: {sorted(unknown)}")
        members = tuple(Member(**m) for m in data.get("members", ()))
        return cls(**{**data, "members": members})

    @classmethod
    def from_json(cls, text: str | bytes) -> OverlayConfig:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the config is a JSON object")
        return cls.from_dict(data)
