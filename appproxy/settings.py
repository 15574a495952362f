"""The proxy's settings, read from ``JOBGATE_*`` environment variables.

Only ``JOBGATE_PROXY_SECRET`` is required: it signs app tokens and cookies and must be
the gateway's value too. It is a :class:`~pydantic.SecretStr`, so it never shows in a
repr or a log line. Lists (trusted proxies, metrics networks) take JSON or commas.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["ProxySettings"]

_PRIVATE_NETWORKS = ["127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
Networks = Annotated[list[str], NoDecode]


class ProxySettings(BaseSettings):
    """How the proxy listens, whom it asks, and how long things last (seconds)."""

    model_config = SettingsConfigDict(env_prefix="JOBGATE_", extra="ignore")

    redis_url: str = "redis://127.0.0.1:6379/0"
    #: log in to Redis as the proxies' own user, jobgate-proxy (its password derived from
    #: the proxy secret), which the gateway makes with the same setting (contract/acl.py)
    redis_users: bool = False
    gateway_url: str = "http://127.0.0.1:8420"  # asked GET /v1/users/me for Bearer keys
    proxy_secret: SecretStr = Field(min_length=16)
    proxy_host: str = "127.0.0.1"
    proxy_port: int = Field(default=8421, ge=0, le=65535)
    #: how browsers reach the proxy (scheme://host[:port], served at the root of its host)
    proxy_public_url: str | None = None
    #: set to serve apps as {session}--{app}.{base_domain} as well as /s/{session}/{app}/
    proxy_base_domain: str | None = None
    proxy_cookie_lifetime: int = Field(default=12 * 3600, gt=0)
    proxy_upstream_connect_timeout: float = Field(default=10.0, gt=0)
    #: longest silence from an app before a request fails (None: wait as long as the client)
    proxy_upstream_read_timeout: float | None = Field(default=300.0, gt=0)
    proxy_upstream_pool_size: int = Field(default=512, ge=1)
    #: peers whose X-Forwarded-For/-Proto/-Host are believed (a TLS terminator in front)
    proxy_trusted_proxies: Networks = Field(default_factory=list)
    #: networks that may read /_jobgate/metrics
    proxy_metrics_allow: Networks = Field(default_factory=lambda: list(_PRIVATE_NETWORKS))
    proxy_route_cache_size: int = Field(default=10_000, ge=1)
    proxy_route_cache_ttl: float = Field(default=30.0, gt=0)
    #: how long a key's answer from the gateway is kept (a revoked key works that long here)
    proxy_user_cache_ttl: float = Field(default=5.0, ge=0)
    proxy_activity_interval: float = Field(default=5.0, gt=0)
    proxy_access_log: bool = False  # uvicorn's access log, with tokens redacted
    proxy_workers: int = Field(default=1, ge=1)
    #: serve the common inference request from the HTTP parser's callbacks (no ASGI cycle)
    proxy_fast_lane: bool = True

    @field_validator("proxy_trusted_proxies", "proxy_metrics_allow", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("proxy_trusted_proxies", "proxy_metrics_allow")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError as exc:
                raise ValueError(f"{item!r} is not an IP address or network") from exc
        return value

    @field_validator("proxy_public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError(f"public URL must be http(s)://host[:port], got {value!r}")
        if parts.path not in {"", "/"} or parts.query:
            raise ValueError("the proxy must be served at the root of its host: drop the path")
        return f"{parts.scheme}://{parts.netloc}"

    @field_validator("proxy_base_domain")
    @classmethod
    def _base_domain(cls, value: str | None) -> str | None:
        if not value:
            return None
        domain = value.strip().strip(".").lower()
        if "/" in domain or ":" in domain:
            raise ValueError(f"base domain is a host name such as apps.example.org: {value!r}")
        return domain

    @property
    def public_url(self) -> str:
        return self.proxy_public_url or f"http://{self.proxy_host}:{self.proxy_port}"

    @property
    def secure_public_url(self) -> bool:
        return self.public_url.startswith("https://")
