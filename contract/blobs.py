"""Content-addressed blobs (working directories): the digest format and the route.

A blob is named by the sha256 of its bytes, ``sha256:<64 lowercase hex>``. Clients put
it at ``/v1/blobs/{digest}`` (the gateway hashes what arrives and refuses a mismatch);
workers get it from the same path with their node token, then verify it again.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["DIGEST_PATTERN", "blob_path", "is_digest"]

DIGEST_PATTERN: Final = r"^sha256:[0-9a-f]{64}$"
_DIGEST = re.compile(DIGEST_PATTERN)


def is_digest(value: str) -> bool:
    return bool(_DIGEST.match(value))


def blob_path(digest: str) -> str:
    """The API path of a blob (for clients and workers alike)."""
    return f"/v1/blobs/{digest}"
