"""Domain errors, free of HTTP. The API maps them to RFC 7807 problems at the edge.

::

    JobgateError
     ├── NotFound            404  the thing does not exist, or is not yours
     ├── Unauthenticated     401  no key, or a key that is unknown or revoked
     ├── Forbidden           403  authenticated, but not allowed (admin only ...)
     ├── Invalid             422  input that cannot be accepted (names the field), including
     │                            an Idempotency-Key reused for a different request body
     ├── Conflict            409  the state does not allow it (already ended, name taken ...)
     └── QuotaExceeded       429  a resource policy refuses more
"""

from __future__ import annotations

__all__ = [
    "Conflict",
    "Forbidden",
    "Invalid",
    "JobgateError",
    "NotFound",
    "QuotaExceeded",
    "Unauthenticated",
]


class JobgateError(Exception):
    status = 500
    title = "Internal error"

    def __init__(self, detail: str, **extra: object) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class NotFound(JobgateError):
    status = 404
    title = "Not found"


class Unauthenticated(JobgateError):
    status = 401
    title = "Unauthenticated"


class Forbidden(JobgateError):
    status = 403
    title = "Forbidden"


class Invalid(JobgateError):
    status = 422
    title = "Invalid request"

    def __init__(self, detail: str, *, field: str | None = None, **extra: object) -> None:
        super().__init__(detail, **extra)
        self.field = field


class Conflict(JobgateError):
    status = 409
    title = "Conflict"


class QuotaExceeded(JobgateError):
    status = 429
    title = "Quota exceeded"
