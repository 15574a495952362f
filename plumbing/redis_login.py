"""A Redis URL with another login: a component's own Redis user (contract/acl.py).

Where the gateway makes users (``JOBGATE_REDIS_USERS``) a worker logs in as
``jobgate-node-NODE`` (the gateway tells it so at start) and the app proxy as
``jobgate-proxy``, each with a password derived from a secret it holds anyway (the node
credential, the proxy secret), whatever login their configured URL names.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit, urlunsplit

__all__ = ["with_login"]


def with_login(redis_url: str, user: str, password: str) -> str:
    """*redis_url* with its user and password replaced (``redis://``, ``rediss://`` and
    ``unix://`` alike)."""
    parts = urlsplit(redis_url)
    host = parts.netloc.rpartition("@")[2]
    login = f"{quote(user, safe='')}:{quote(password, safe='')}@"
    return urlunsplit(parts._replace(netloc=login + host))
