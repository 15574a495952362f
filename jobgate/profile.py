"""The client profile: where the API is and which key to use.

Read from ``$JOBGATE_CONFIG`` or ``~/.config/jobgate/config.toml``; ``JOBGATE_URL`` and
``JOBGATE_API_KEY`` override it. ``jobgate up`` writes it (mode 0600)::

    url = "http://127.0.0.1:8420"
    api_key = "jg_..."
    proxy_url = "http://127.0.0.1:8421"
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import platformdirs
import tomli_w

__all__ = ["Profile", "profile_path"]


def profile_path() -> Path:
    explicit = os.environ.get("JOBGATE_CONFIG")
    if explicit:
        return Path(explicit)
    return Path(platformdirs.user_config_dir("jobgate")) / "config.toml"


@dataclass(frozen=True, slots=True)
class Profile:
    url: str
    api_key: str
    proxy_url: str = ""

    @classmethod
    def load(cls) -> Profile:
        data: dict[str, str] = {}
        path = profile_path()
        if path.exists():
            with path.open("rb") as fh:
                data = {k: str(v) for k, v in tomllib.load(fh).items()}
        url = os.environ.get("JOBGATE_URL") or data.get("url", "")
        key = os.environ.get("JOBGATE_API_KEY") or data.get("api_key", "")
        proxy = os.environ.get("JOBGATE_PROXY_URL") or data.get("proxy_url", "")
        return cls(url=url.rstrip("/"), api_key=key, proxy_url=proxy.rstrip("/"))

    def save(self, path: Path | None = None) -> Path:
        path = path or profile_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.touch(mode=0o600)
        tmp.write_text(
            tomli_w.dumps({"url": self.url, "api_key": self.api_key, "proxy_url": self.proxy_url})
        )
        tmp.chmod(0o600)
        tmp.replace(path)
        return path
