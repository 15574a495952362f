"""What the proxy presents to a session's app so that the app lets it in, and nobody else.

Each app of an interactive session checks the session's app secret
(:func:`contract.tokens.app_secret`, derived here from the proxy secret and the session
id, never read from Redis); the route says which form the app checks
(:data:`contract.apps.CREDENTIALS`). Every form replaces what the client sent under the
same name, so a user cannot show an app someone else's secret, or a wrong one.

    >>> c = app_credential("token", "s3cret")
    >>> dict(c.headers)[b"authorization"]
    b'token s3cret'
    >>> app_credential("cookie", "s3cret").cookie
    (b'code-server-session', b's3cret')
    >>> app_credential(None, "s3cret") is None
    True
"""

from __future__ import annotations

import base64
from typing import Final

from appproxy.backend.headers import Credential
from contract.apps import BASIC_USER, CODE_SERVER_COOKIE
from contract.apps import Credential as Form
from contract.tokens import app_secret

__all__ = ["SECRET_HEADER", "app_credential", "session_credential"]

#: sent to every app that checks a secret (an app of the image's own checks this one)
SECRET_HEADER: Final = b"x-jobgate-app-secret"


def app_credential(form: Form | None, secret: str) -> Credential | None:
    """The headers and cookie that present *secret* in *form* (None: the app checks none)."""
    if form is None:
        return None
    raw = secret.encode("ascii")
    headers = [(SECRET_HEADER, raw)]
    cookie = None
    if form == "token":
        headers.append((b"authorization", b"token " + raw))
    elif form == "basic":
        pair = base64.b64encode(BASIC_USER.encode() + b":" + raw)
        headers.append((b"authorization", b"Basic " + pair))
    elif form == "cookie":
        cookie = (CODE_SERVER_COOKIE.encode(), raw)
    return Credential(tuple(headers), cookie)


def session_credential(key: str, session_id: str, form: Form | None) -> Credential | None:
    """The credential for an app of *session_id* (an HMAC: about a microsecond)."""
    return None if form is None else app_credential(form, app_secret(key, session_id))
