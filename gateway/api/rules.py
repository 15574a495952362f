"""Every pattern a request's field or parameter must match, and its rule in words.

pydantic says ``String should match pattern '^[a-z0-9]…'`` when a value does not match;
``problems.py`` says ``name: must be lower-case letters, digits and '-', 1-40 characters,
starting and ending with a letter or digit`` instead, from :data:`RULES`. A pattern
without words here would be shown as pydantic's regex: the unit test
``tests/unit/gateway/test_rules.py`` finds every pattern the routes check and fails
on one that has none. Patterns used by one route only are defined here, the others
where their values are made (``contract``, ``gateway.domain``).
"""

from __future__ import annotations

from typing import Final

from contract.blobs import DIGEST_PATTERN
from contract.endpoints import ENDPOINT_NAME_PATTERN, PROBE_PATH_PATTERN
from contract.folders import FOLDER_NAME_PATTERN
from contract.secrets import SECRET_NAME_PATTERN
from gateway.domain.requests import (
    CALLBACK_SECRET_PATTERN,
    FOLDER_REF_PATTERN,
    NAME_PATTERN,
    NO_NUL,
    WORKDIR_PATTERN,
)
from gateway.domain.templates import PARAM_NAME

__all__ = [
    "ACTION_PATTERN",
    "AUDIT_CURSOR_PATTERN",
    "CLAIM_PATTERN",
    "CURSOR_PATTERN",
    "ID_PREFIX_PATTERN",
    "ISSUER_PATTERN",
    "PROTOCOL_PATTERN",
    "RULES",
    "SCOPES_PATTERN",
    "SHORT_NAME_PATTERN",
    "UPLOAD_ID_PATTERN",
    "USER_NAME_PATTERN",
    "in_words",
]

#: projects and resource groups
SHORT_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
USER_NAME_PATTERN: Final = r"^[a-z][a-z0-9_.-]{0,63}$"
#: a session id, or the start of one
ID_PREFIX_PATTERN: Final = r"^[0-9a-fA-F-]+$"
CURSOR_PATTERN: Final = r"^[A-Za-z0-9_-]+$"
UPLOAD_ID_PATTERN: Final = r"^[0-9a-f]{32}$"
PROTOCOL_PATTERN: Final = "^(http|tcp)$"
#: the audit log's filters: an operation id, and its page cursor (a row id)
ACTION_PATTERN: Final = r"^[a-z0-9-]+$"
AUDIT_CURSOR_PATTERN: Final = r"^[0-9]{1,18}$"
#: an ID token claim's name (single sign-on: a provider's username and groups claims)
CLAIM_PATTERN: Final = r"^[A-Za-z0-9_:./-]{1,64}$"
#: the scopes a sign-in asks for: space-separated, openid among them
SCOPES_PATTERN: Final = r"^([\x21-\x7e]+ )*openid( [\x21-\x7e]+)*$"
#: an identity provider's issuer: https, or http on this machine's loopback
ISSUER_PATTERN: Final = (
    r"^(https://[A-Za-z0-9.-]+|http://(localhost|127\.0\.0\.1|\[::1\]))"
    r"(:([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?"
    r"(/[A-Za-z0-9._~%!$&'()*+,;=:@/-]*)?$"
)

_FOLDER_NAME = (
    "letters, digits, '_', '.' and '-', 1-64 characters, starting with a letter or digit "
    "(or with one '.' before it, for a dot-folder)"
)

#: pattern -> what a value must be, in words (after "must be")
RULES: Final[dict[str, str]] = {
    NAME_PATTERN: (
        "letters, digits, '_', '.' and '-', 1-128 characters, starting with a letter or digit"
    ),
    SHORT_NAME_PATTERN: (
        "letters, digits, '_', '.' and '-', 1-64 characters, starting with a letter or digit"
    ),
    USER_NAME_PATTERN: (
        "lower-case letters, digits, '_', '.' and '-', 1-64 characters, starting with a letter"
    ),
    f"^{ENDPOINT_NAME_PATTERN}$": (
        "lower-case letters, digits and '-', 1-40 characters, starting and ending with a "
        "letter or digit"
    ),
    FOLDER_NAME_PATTERN: _FOLDER_NAME,
    FOLDER_REF_PATTERN: f"a folder id, or a folder name: {_FOLDER_NAME}",
    PARAM_NAME: "letters, digits and '_', 1-64 characters, not starting with a digit",
    SECRET_NAME_PATTERN: "letters, digits and '_', 1-64 characters, not starting with a digit",
    NO_NUL: "text without NUL characters",
    WORKDIR_PATTERN: "an absolute path (starting with '/'), without NUL characters",
    PROBE_PATH_PATTERN: "a path starting with '/', without spaces, line breaks or NUL",
    DIGEST_PATTERN: "'sha256:' and 64 lower-case hex digits",
    CALLBACK_SECRET_PATTERN: (
        "'whsec_' and 16-120 base64 characters (letters, digits, '+', '/' and '=')"
    ),
    ID_PREFIX_PATTERN: "hex digits and '-' (an id, or the start of one)",
    CURSOR_PATTERN: "the next_cursor of the page before (letters, digits, '_' and '-')",
    UPLOAD_ID_PATTERN: "32 lower-case hex digits (an upload's id)",
    PROTOCOL_PATTERN: "http or tcp",
    ACTION_PATTERN: "an operation id: lower-case letters, digits and '-' (sessions-create)",
    AUDIT_CURSOR_PATTERN: "the next_cursor of the page before (digits)",
    CLAIM_PATTERN: "a claim's name: letters, digits, '_', ':', '.', '/' and '-', 1-64 characters",
    SCOPES_PATTERN: "scopes separated by single spaces, openid among them",
    ISSUER_PATTERN: (
        "an https:// URL (http:// only on localhost, 127.0.0.1 or [::1]), without a query "
        "or fragment"
    ),
}


def in_words(pattern: str) -> str | None:
    """What a value of *pattern* must be, in words (None: a pattern without words)."""
    return RULES.get(pattern)
