"""Proxy settings from JOBGATE_* variables: required secret, lists, URL checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from appproxy.settings import ProxySettings

SECRET = "settings-secret-0123456789"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("JOBGATE_"):
            monkeypatch.delenv(name)


def test_reads_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBGATE_PROXY_SECRET", SECRET)
    monkeypatch.setenv("JOBGATE_REDIS_URL", "redis://r:6379/1")
    monkeypatch.setenv("JOBGATE_GATEWAY_URL", "http://gw:8000")
    monkeypatch.setenv("JOBGATE_PROXY_PORT", "9000")
    monkeypatch.setenv("JOBGATE_PROXY_BASE_DOMAIN", "Apps.Example.org.")
    monkeypatch.setenv("JOBGATE_PROXY_TRUSTED_PROXIES", "10.0.0.0/8, 127.0.0.1")
    monkeypatch.setenv("JOBGATE_PROXY_METRICS_ALLOW", '["192.168.0.0/16"]')
    settings = ProxySettings()
    assert settings.proxy_secret.get_secret_value() == SECRET
    assert (settings.redis_url, settings.gateway_url) == ("redis://r:6379/1", "http://gw:8000")
    assert settings.proxy_base_domain == "apps.example.org"
    assert settings.proxy_trusted_proxies == ["10.0.0.0/8", "127.0.0.1"]
    assert settings.proxy_metrics_allow == ["192.168.0.0/16"]
    assert settings.public_url == "http://127.0.0.1:9000"
    assert settings.proxy_cookie_lifetime == 12 * 3600


def test_secret_is_required_and_never_shown() -> None:
    with pytest.raises(ValidationError, match="proxy_secret"):
        ProxySettings()
    settings = ProxySettings(proxy_secret=SECRET)
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings.model_dump())


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        ("short secret", {"proxy_secret": "short"}, "at least 16"),
        ("public URL with a path", {"proxy_public_url": "https://x.org/apps"}, "root"),
        ("public URL without scheme", {"proxy_public_url": "x.org"}, "http"),
        ("bad network", {"proxy_trusted_proxies": "10.0.0.0/33"}, "not an IP"),
        ("base domain with scheme", {"proxy_base_domain": "https://x.org"}, "host name"),
        ("zero cookie lifetime", {"proxy_cookie_lifetime": 0}, "greater than 0"),
    ],
)
def test_bad_settings(name: str, overrides: dict[str, object], message: str) -> None:
    options: dict[str, object] = {"proxy_secret": SECRET, **overrides}
    with pytest.raises(ValidationError, match=message):
        ProxySettings(**options)  # type: ignore[arg-type]


def test_https_public_url_makes_cookies_secure() -> None:
    settings = ProxySettings(proxy_secret=SECRET, proxy_public_url="https://apps.example.org/")
    assert settings.public_url == "https://apps.example.org"
    assert settings.secure_public_url
