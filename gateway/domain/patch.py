"""JSON Merge Patch (RFC 7396): what every PATCH route of the API applies.

A key in the patch sets that key; a key set to ``null`` removes it; an object merges
into an object key by key; a key not in the patch stays as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["merge_patch"]


def merge_patch(target: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(target or {})
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping):
            current = merged.get(key)
            merged[key] = merge_patch(current if isinstance(current, Mapping) else {}, value)
        else:
            merged[key] = value
    return merged
