"""What the app proxies report about an endpoint: readiness per replica, load per proxy.

Both hashes are written by the proxies (contract.endpoints); these helpers read them for
the controller and for ``GET /v1/endpoints/{name}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from redis.asyncio import Redis

from contract.endpoints import LOAD_REPORT_TTL, LoadReport, ReplicaHealth
from contract.keys import endpoint_load_key, endpoint_ready_key

__all__ = ["Load", "read_health", "read_load"]


@dataclass(frozen=True, slots=True)
class Load:
    """The fresh reports of every proxy, summed."""

    in_flight: int = 0
    queued: int = 0
    rps: float = 0.0
    proxies: int = 0
    per_replica: dict[str, int] = field(default_factory=dict)  # in flight, by session id
    per_replica_rps: dict[str, float] = field(default_factory=dict)

    @property
    def concurrency(self) -> int:
        return self.in_flight + self.queued


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


async def read_health(redis: Redis, endpoint_id: str) -> dict[str, ReplicaHealth]:
    raw: dict[Any, Any] = await redis.hgetall(endpoint_ready_key(endpoint_id))  # type: ignore[misc]
    out: dict[str, ReplicaHealth] = {}
    for key, value in raw.items():
        try:
            out[_text(key)] = ReplicaHealth.model_validate_json(value)
        except ValidationError:
            continue
    return out


async def read_load(redis: Redis, endpoint_id: str, now: float) -> Load:
    raw: dict[Any, Any] = await redis.hgetall(endpoint_load_key(endpoint_id))  # type: ignore[misc]
    in_flight = queued = proxies = 0
    rps = 0.0
    per: dict[str, int] = {}
    per_rps: dict[str, float] = {}
    for value in raw.values():
        try:
            report = LoadReport.model_validate_json(value)
        except ValidationError:
            continue
        if now - report.at > LOAD_REPORT_TTL:
            continue
        proxies += 1
        in_flight += report.in_flight
        queued += report.queued
        rps += report.rps
        for sid, n in report.per_replica_in_flight.items():
            per[sid] = per.get(sid, 0) + n
        for sid, r in report.per_replica_rps.items():
            per_rps[sid] = per_rps.get(sid, 0.0) + r
    return Load(in_flight, queued, rps, proxies, per, per_rps)
