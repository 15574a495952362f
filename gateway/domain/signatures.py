"""Webhook signatures, both ways: pure functions, constant-time compares.

* **Standard Webhooks v1** (what jobgate signs its own webhooks with, and one of the
  sources a trigger accepts): ``webhook-signature: v1,<base64 HMAC-SHA256>`` over
  ``{webhook-id}.{webhook-timestamp}.{body}`` with the key inside a ``whsec_<base64>``
  secret; several space-separated signatures when a secret is being rotated; the
  timestamp must be within :data:`TOLERANCE_S` of now.
* **GitHub**: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>``.
* **GitLab**: ``X-Gitlab-Token`` is the secret itself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence

__all__ = [
    "TOLERANCE_S",
    "BadSignature",
    "new_secret",
    "sign",
    "signature_header",
    "verify_github",
    "verify_gitlab",
    "verify_standard",
]

TOLERANCE_S = 5 * 60
SECRET_PREFIX = "whsec_"


class BadSignature(Exception):
    """The request is not signed by who holds the secret (the message says how)."""


def new_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` + base64 of 24 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def _key(secret: str) -> bytes:
    if secret.startswith(SECRET_PREFIX):
        return base64.b64decode(secret[len(SECRET_PREFIX) :])
    return secret.encode()


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64>``: one signature of one message."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_header(secrets_: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one signature per secret (rotation sends two)."""
    return " ".join(sign(s, msg_id, timestamp, body) for s in secrets_)


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name) or headers.get(name.lower())
    if not value:
        raise BadSignature(f"no {name} header")
    return value


def verify_standard(secret: str, headers: Mapping[str, str], body: bytes, now: float) -> str:
    """Check a Standard Webhooks request; return its ``webhook-id``."""
    msg_id = _header(headers, "webhook-id")
    stamp = _header(headers, "webhook-timestamp")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise BadSignature("webhook-timestamp is not a number of seconds") from None
    if abs(now - timestamp) > TOLERANCE_S:
        raise BadSignature("webhook-timestamp is more than 5 minutes from now")
    expected = sign(secret, msg_id, timestamp, body).split(",", 1)[1].encode()
    for given in _header(headers, "webhook-signature").split():
        version, _, value = given.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected):
            return msg_id
    raise BadSignature("no webhook-signature matches")


def verify_github(secret: str, headers: Mapping[str, str], body: bytes) -> None:
    given = _header(headers, "X-Hub-Signature-256")
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise BadSignature("X-Hub-Signature-256 does not match")


def verify_gitlab(secret: str, headers: Mapping[str, str]) -> None:
    given = _header(headers, "X-Gitlab-Token")
    if not hmac.compare_digest(given.encode(), secret.encode()):
        raise BadSignature("X-Gitlab-Token does not match")
