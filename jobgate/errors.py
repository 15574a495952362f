""":class:`ApiError`, the one error a command raises for a person to read: what the API
refused (its RFC 7807 problem) or what was wrong with the command line. Its own module,
free of any import, so that :func:`jobgate.cli.invoke` can catch it without loading the
HTTP client (``jobgate --version`` and ``--help`` stay fast)."""

from __future__ import annotations

__all__ = ["ApiError"]


class ApiError(Exception):
    def __init__(self, status: int, title: str, detail: str, field: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.field = field

    def __str__(self) -> str:
        return self.detail
