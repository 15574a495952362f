"""Secret values masked in a stream of output (pure).

A stream arrives in chunks, and a value may be split between two of them. ``Masker``
replaces every whole value with ``***`` and holds back the end of a chunk while it is
the beginning of some value (at most the longest value's length less one byte): the
caller keeps those bytes and passes them in front of the stream's next chunk. Bytes
held when a stream ends for good are never stored (they are a beginning of a secret,
or bytes that happened to look like one).

Values shorter than ``MIN_MASKED`` bytes are refused when a secret is created: ``***``
is then never longer than what it replaces, which the log readers' offsets rely on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MASK", "MIN_MASKED", "Masker"]

MASK = b"***"
MIN_MASKED = 4


class Masker:
    def __init__(self, values: Iterable[bytes]) -> None:
        self.values = sorted({v for v in values if len(v) >= MIN_MASKED}, key=len, reverse=True)
        self._pattern = (
            re.compile(b"|".join(re.escape(v) for v in self.values)) if self.values else None
        )

    def __bool__(self) -> bool:
        return self._pattern is not None

    def mask(self, held: bytes, data: bytes) -> tuple[bytes, bytes]:
        """(what may be stored, what to hold for the next chunk) of *held* + *data*."""
        text = held + data
        if self._pattern is None:
            return text, b""
        last_end = 0
        for match in self._pattern.finditer(text):
            last_end = match.end()
        keep = self._dangling(text, last_end)
        cut = len(text) - keep
        return self._pattern.sub(MASK, text[:cut]), text[cut:]

    def _dangling(self, text: bytes, after: int) -> int:
        """The longest end of *text* (starting at or after *after*) that is a proper
        beginning of a value."""
        best = 0
        for value in self.values:
            window = min(len(value) - 1, len(text) - after)
            if window <= best:
                continue
            start = len(text) - window
            first = value[0]
            pos = text.find(first, start)
            while pos != -1:
                k = len(text) - pos
                if k <= best:
                    break
                if value.startswith(text[pos:]):
                    best = k
                    break
                pos = text.find(first, pos + 1)
        return best
