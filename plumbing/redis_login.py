"""Log in to Redis as a component's own user when Redis has it (contract/acl.py).

A worker (as ``jobgate-node-NODE``) and the app proxy (as ``jobgate-proxy``) are given a
Redis URL without a password where the gateway makes their users
(``JOBGATE_REDIS_USERS``): each derives its password from a secret it holds anyway (the
node credential, the proxy secret) and logs in with it. Where Redis has no such user
(``WRONGPASS``), the URL is used as it was given, so a deployment without users of its
own runs as before.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import quote, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = ["own_login", "with_login"]

log = logging.getLogger(__name__)


def with_login(redis_url: str, user: str, password: str) -> str:
    """*redis_url* with its user and password replaced (``redis://``, ``rediss://`` and
    ``unix://`` alike)."""
    parts = urlsplit(redis_url)
    host = parts.netloc.rpartition("@")[2]
    login = f"{quote(user, safe='')}:{quote(password, safe='')}@"
    return urlunsplit(parts._replace(netloc=login + host))


async def own_login(
    redis_url: str, user: str, password: str, *, who: str, tries: int = 6, pause_s: float = 1.0
) -> str:
    """The Redis URL *who* uses: as *user* when Redis has it, else *redis_url* as given. A
    Redis that does not answer is asked *tries* times, as arq does before it gives up."""
    own = with_login(redis_url, user, password)
    for attempt in range(1, tries + 1):
        client = aioredis.Redis.from_url(own)
        try:
            await client.ping()
        except (AuthenticationError, ResponseError) as exc:  # WRONGPASS: no user of its own
            log.info("%s: Redis has no user %s (%s); using the configured login",
                     who, user, str(exc).split(",")[0])  # fmt: skip
            return redis_url
        except (RedisConnectionError, OSError):
            if attempt == tries:
                raise
            await asyncio.sleep(pause_s)
            continue
        finally:
            await client.aclose()
        break
    log.info("%s: Redis login as its own user %s", who, user)
    return own
