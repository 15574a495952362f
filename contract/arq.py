"""How an arq job is encoded on the queues: JSON, never arq's default pickle.

Both ends use this pair (the gateway's pools and workers in :mod:`plumbing.arq`, which
hand it to arq as ``job_serializer`` / ``job_deserializer``), so a queued job is readable
in Redis and decoding one never executes code. Plain ``json``: the wire needs no arq.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_deserializer", "json_serializer"]


def json_serializer(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), default=str).encode()


def json_deserializer(raw: bytes) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(raw)
    return value
