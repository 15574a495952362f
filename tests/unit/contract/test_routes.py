"""contract/routes.py: the app-name rule the proxy parses is the one runtimes accept."""

from __future__ import annotations

import re

import pytest

from contract.routes import APP_NAME_PATTERN, valid_app_name
from plugins.runtimes.base import PORT_NAME_PATTERN, parse_service_ports
from plugins.runtimes.podman.spec import _PORT_NAME as PODMAN_PORT_NAME


def test_one_rule_for_app_and_port_names() -> None:
    # plugins may not import contract (nor contract plugins), so the rule is written
    # twice; this is what keeps the two copies the same
    assert APP_NAME_PATTERN == PORT_NAME_PATTERN
    assert PODMAN_PORT_NAME.pattern == f"^{PORT_NAME_PATTERN}$"


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("jupyter", True),
        ("code-server", True),
        ("a" * 32, True),
        ("a" * 33, False),  # one DNS label holds "{session}--{app}"
        ("Jupyter", False),
        ("-x", False),
        ("", False),
        ("a.b", False),
    ],
)
def test_a_name_is_valid_everywhere_or_nowhere(name: str, ok: bool) -> None:
    assert valid_app_name(name) is ok
    assert bool(parse_service_ports(f"{name}:http:8888")) is ok
    assert bool(re.fullmatch(PORT_NAME_PATTERN, name)) is ok
