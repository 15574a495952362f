"""A group's egress in its scheduler configuration (docs/security.md, Egress)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from plugins.scheduling.config import effective_config


def test_a_group_that_says_nothing_gets_the_gateways_default_secure_unless_told() -> None:
    assert effective_config({}).egress == "no-private"
    assert effective_config({}, egress="open").egress == "open"  # jobgate up's
    assert effective_config({"egress": "none"}, egress="open").egress == "none"  # its own wins


def test_egress_allow_takes_ipv4_networks_normalized_and_nothing_else() -> None:
    taken = effective_config({"egress_allow": ["10.0.5.7/24", "192.168.1.1", "10.0.5.0/24"]})
    assert taken.egress_allow == ("10.0.5.0/24", "192.168.1.1/32")
    for bad in ("", "10.0.0.256", "::1", "10.0.0.0/33", " 10.0.0.1", "example.org"):
        with pytest.raises(ValidationError, match="egress_allow"):
            effective_config({"egress_allow": [bad]}, strict=True)
