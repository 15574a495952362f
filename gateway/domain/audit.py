"""The audit log's rules, pure: which requests leave a row, and what the row says.

Every request to ``/v1`` other than GET, HEAD and OPTIONS leaves one, whatever its answer
(a 401 or a 403 included), and so does a console sign-in or sign-out; except the calls
nodes make all the time, when they succeed (their log uploads: a refused one is
recorded). What a row never holds: a body, a query string, a header, a key or token (of
a key only its name and its 9-character shown prefix, as listings show it).
docs/security.md says it for people.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from gateway.domain.errors import Invalid

__all__ = [
    "PAGE_MAX",
    "AuditEntry",
    "audited",
    "kept",
    "presented",
    "target_of",
    "time_range",
]

#: methods that change nothing: never recorded
READS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
#: actions recorded only when refused (a node's log uploads: several a second per kernel)
ONLY_REFUSED: Final = frozenset({"internal-append-logs"})
#: the most rows one page of ``GET /v1/audit`` returns
PAGE_MAX: Final = 1000
#: the longest path and target kept (longer ones are cut, marked with "…")
PATH_MAX: Final = 1024
TARGET_MAX: Final = 512
#: a key's shown prefix: "jg_" and 6 of its characters (``ApiKey.prefix``)
KEY_PREFIX_LENGTH: Final = 9


@dataclass(slots=True)
class AuditEntry:
    """One request's row, filled in while it is answered: the middleware sets what the
    request says, the authentication dependencies who called and how."""

    at: datetime
    method: str
    path: str
    client: str
    actor: str | None = None
    credential: str = ""
    action: str = ""
    target: str = ""
    status: int = 0

    def row(self) -> dict[str, object]:
        """The ``audit_log`` row's values."""
        return {
            "at": self.at,
            "actor": self.actor,
            "credential": self.credential[:160],
            "action": self.action[:64] or "unmatched",
            "method": self.method[:8],
            "path": _cut(self.path, PATH_MAX),
            "target": _cut(self.target, TARGET_MAX),
            "status": self.status,
            "client": self.client[:64],
        }


#: the console's own writes: signing in (with a key) and out
CONSOLE_WRITES: Final = frozenset({"/sign-in", "/sign-out"})
CONSOLE_SSO: Final = "/sign-in/oidc/"


def audited(method: str, path: str) -> bool:
    """Whether a request may leave a row at all (then :func:`kept` decides on its answer)."""
    if path.startswith(CONSOLE_SSO) and path.endswith("/callback"):
        return True  # a GET that signs in (gateway/console/sso.py)
    if method in READS:
        return False
    return path.startswith("/v1/") or path == "/v1" or path in CONSOLE_WRITES


def kept(action: str, status: int) -> bool:
    """Whether a recorded request's row is written, given its action and answer."""
    return action not in ONLY_REFUSED or status >= 400


def presented(token: str) -> str:
    """What a row says of a bearer token that was refused: a ``jg_`` key's shown prefix
    (as ``jobgate keys ls`` shows it), never the rest; anything else, only that it was one."""
    if token.startswith("jg_") and len(token) > KEY_PREFIX_LENGTH:
        return f"refused key {token[:KEY_PREFIX_LENGTH]}"
    return "refused bearer token"


def target_of(params: Mapping[str, object]) -> str:
    """The route's path parameters as ``name=value`` pairs (``session_id=…``)."""
    return " ".join(f"{name}={value}" for name, value in params.items())


def time_range(
    start: datetime | None, end: datetime | None
) -> tuple[datetime | None, datetime | None]:
    """A search's ``from`` and ``to`` in UTC: ``from`` before ``to``, each one UTC can
    hold (year 1 an hour east of it cannot), else a 422 naming the parameter."""
    utc: list[datetime | None] = []
    for at, name in ((start, "from"), (end, "to")):
        try:
            utc.append(at.astimezone(UTC) if at is not None else None)
        except OverflowError:
            raise Invalid(f"{name!r} is out of range", field=name) from None
    first, last = utc
    if first is not None and last is not None and first >= last:
        raise Invalid("'from' must be before 'to'", field="from")
    return first, last


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
