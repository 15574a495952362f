"""The client profile: where the API is and which key to use.

Read from ``$JOBGATE_CONFIG`` or ``~/.config/jobgate/config.toml``; ``JOBGATE_URL`` and
``JOBGATE_API_KEY`` override it. ``jobgate up`` writes it (mode 0600)::

    url = "http://127.0.0.1:8420"
    api_key = "jg_..."
    proxy_url = "http://127.0.0.1:8421"

``jobgate login`` adds an ``[sso]`` table: the provider's refresh token and where to
trade it, and the name and expiry of the short-lived key it made (``jobgate/sso.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import platformdirs
import tomli_w

__all__ = ["Profile", "SignOn", "profile_lock", "profile_path"]


def profile_path() -> Path:
    explicit = os.environ.get("JOBGATE_CONFIG")
    if explicit:
        return Path(explicit)
    return Path(platformdirs.user_config_dir("jobgate")) / "config.toml"


@dataclass(frozen=True, slots=True)
class SignOn:
    """A ``jobgate login``: what renews the key when it expires."""

    provider: str
    token_endpoint: str
    client_id: str
    refresh_token: str
    key_name: str
    key_expires_at: str  # ISO 8601, as the gateway said
    revocation_endpoint: str = ""  # where `jobgate logout` revokes the refresh token

    @classmethod
    def from_toml(cls, data: object) -> SignOn | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(**{name: str(data[name]) for name in cls.__slots__ if name in data})
        except TypeError:
            return None  # a table from another version: sign in again


@dataclass(frozen=True, slots=True)
class Profile:
    url: str
    api_key: str
    proxy_url: str = ""
    sso: SignOn | None = None

    @classmethod
    def load(cls) -> Profile:
        data: dict[str, object] = {}
        path = profile_path()
        if path.exists():
            with path.open("rb") as fh:
                data = tomllib.load(fh)
        url = os.environ.get("JOBGATE_URL") or str(data.get("url", ""))
        key = os.environ.get("JOBGATE_API_KEY") or str(data.get("api_key", ""))
        proxy = os.environ.get("JOBGATE_PROXY_URL") or str(data.get("proxy_url", ""))
        # a key from the environment is used as given: never renewed over it
        sso = None if os.environ.get("JOBGATE_API_KEY") else SignOn.from_toml(data.get("sso"))
        return cls(url=url.rstrip("/"), api_key=key, proxy_url=proxy.rstrip("/"), sso=sso)

    def save(self, path: Path | None = None) -> Path:
        path = path or profile_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        data: dict[str, object] = {
            "url": self.url,
            "api_key": self.api_key,
            "proxy_url": self.proxy_url,
        }
        if self.sso is not None:
            data["sso"] = {name: getattr(self.sso, name) for name in SignOn.__slots__}
        # a file of its own beside it (mode 0600 from the start), renamed over it: two
        # commands saving at once each replace the profile whole
        fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(tomli_w.dumps(data))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


@contextlib.contextmanager
def profile_lock() -> Iterator[None]:
    """Held while a command renews the profile's key (``jobgate/sso.py``): an advisory
    lock on a file beside the profile."""
    path = profile_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing it releases the lock
