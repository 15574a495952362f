"""The route record and app URLs the gateway builds with this module."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contract.routes import AppRoute, RouteRecord, app_url

SID = "0b5e7c1a-7d43-4cf4-9a51-2f0e3c8d9e11"


def test_record_json_round_trip() -> None:
    record = RouteRecord(
        session_id=SID,
        owner_id="u1",
        apps={
            "jupyter": AppRoute(upstream="http://10.0.0.5:8888/"),
            "code-server": AppRoute(upstream="http://10.0.0.5:8080", strip_prefix=True),
        },
        updated_at=5.0,
    )
    again = RouteRecord.from_json(record.to_json())
    assert again == record
    assert again.apps["jupyter"].upstream == "http://10.0.0.5:8888"  # normalised
    assert again.status == "running"


def test_record_ignores_unknown_fields() -> None:  # newer gateways may add some
    raw = (
        f'{{"session_id": "{SID}", "owner_id": "u", "status": "ended", "apps": {{}},'
        ' "updated_at": 1, "new_field": 3}'
    )
    assert RouteRecord.from_json(raw).status == "ended"


@pytest.mark.parametrize(
    ("name", "upstream"),
    [
        ("no scheme", "10.0.0.5:8888"),
        ("ftp", "ftp://10.0.0.5"),
        ("with a path", "http://10.0.0.5:8888/lab"),
        ("with a query", "http://10.0.0.5:8888?x=1"),
        ("no host", "http://:8888"),
    ],
)
def test_bad_upstreams(name: str, upstream: str) -> None:
    with pytest.raises(ValidationError, match="upstream"):
        AppRoute(upstream=upstream)


@pytest.mark.parametrize(
    ("name", "session_id", "apps"),
    [
        ("slash in session", "a/b", {}),
        ("double dash in session", "a--b", {}),
        ("too long session", "a" * 65, {}),
        ("upper-case app", SID, {"Jupyter": {"upstream": "http://h:1"}}),
        ("dot in app", SID, {"j.x": {"upstream": "http://h:1"}}),
    ],
)
def test_bad_names(name: str, session_id: str, apps: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RouteRecord.model_validate({"session_id": session_id, "owner_id": "u", "apps": apps})


@pytest.mark.parametrize(
    ("name", "public_url", "base_domain", "expected"),
    [
        (
            "path mode",
            "https://apps.example.org",
            None,
            f"https://apps.example.org/s/{SID}/jupyter/?jobgate_token=T",
        ),
        (
            "path mode, port, trailing slash",
            "http://127.0.0.1:8080/",
            None,
            f"http://127.0.0.1:8080/s/{SID}/jupyter/?jobgate_token=T",
        ),
        (
            "subdomain mode",
            "https://apps.example.org",
            "apps.example.org",
            f"https://{SID}--jupyter.apps.example.org/?jobgate_token=T",
        ),
        (
            "subdomain mode keeps the port",
            "http://localhost:8080",
            "apps.localhost",
            f"http://{SID}--jupyter.apps.localhost:8080/?jobgate_token=T",
        ),
    ],
)
def test_app_url(name: str, public_url: str, base_domain: str | None, expected: str) -> None:
    assert app_url(public_url, SID, "jupyter", "T", base_domain=base_domain) == expected, name
