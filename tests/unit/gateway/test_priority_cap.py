"""The priority a create gives a session under the ``max_priority`` policies (the cap of
the owner and of the project, the lower one applying), without a database: the policies
come from a stub that counts how often they are read again."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.auth import Principal
from gateway.domain.errors import Invalid
from gateway.domain.requests import SessionCreate
from gateway.services.sessions.limits import Limits, Policies

BOB = Principal("ubob", "bob", "user")
ROOT = Principal("uroot", "root", "admin")


class _Stub(Limits):
    def __init__(self, fresh: Policies) -> None:
        self.fresh = fresh
        self.reads = 0

    async def policies(self, *, fresh: bool = False) -> Policies:
        self.reads += 1
        return self.fresh


def _body(**given: Any) -> SessionCreate:
    return SessionCreate.model_validate({"command": ["x"], **given})


def _caps(**caps: int) -> Policies:
    """Policies from ``user_ubob=60``, ``user_default=30``, ``project_p1=40`` ..."""
    policies = Policies()
    for key, cap in caps.items():
        scope, subject = key.split("_", 1)
        policies.priority[scope, "*" if subject == "default" else subject] = cap
    return policies


async def _priority(
    caps: Policies, body: SessionCreate, principal: Principal = BOB, project_id: str | None = None
) -> int:
    return await _Stub(caps).priority(principal, project_id, body, caps)


async def test_no_cap_leaves_the_priority_as_asked() -> None:
    assert await _priority(Policies(), _body(priority=100)) == 100
    assert await _priority(Policies(), _body()) == 50


async def test_above_the_cap_is_refused_naming_whose_cap() -> None:
    with pytest.raises(Invalid) as refused:
        await _priority(_caps(user_ubob=60), _body(priority=90))
    assert refused.value.detail == "priority 90 is above the highest user bob may ask for (60)"
    assert refused.value.field == "priority"
    assert await _priority(_caps(user_ubob=60), _body(priority=60)) == 60


async def test_the_lower_cap_applies_and_a_tie_names_the_user() -> None:
    caps = _caps(user_ubob=60, project_p1=40)
    body = _body(priority=50, project="ml-a")
    with pytest.raises(Invalid, match=r"project ml-a may ask for \(40\)$"):
        await _priority(caps, body, project_id="p1")
    assert await _priority(caps, _body(priority=50)) == 50  # outside the project
    tie = _caps(user_ubob=40, project_p1=40)
    with pytest.raises(Invalid, match=r"user bob may ask for \(40\)$"):
        await _priority(tie, body, project_id="p1")


async def test_the_default_policy_applies_to_admins_and_where_none_is_set() -> None:
    caps = _caps(user_default=30, project_default=20)
    with pytest.raises(Invalid, match=r"user root may ask for \(30\)$"):
        await _priority(caps, _body(priority=31), principal=ROOT)
    assert await _priority(caps, _body(project="ml-a"), project_id="p1") == 20
    own = _caps(user_default=30, user_ubob=70)  # bob's own cap, above the default
    assert await _priority(own, _body(priority=70)) == 70


async def test_no_priority_asked_gets_the_default_lowered_to_the_cap() -> None:
    stub = _Stub(Policies())
    caps = _caps(user_ubob=10)
    assert await stub.priority(BOB, None, _body(), caps) == 10
    assert stub.reads == 0  # nothing refused: the cached policies suffice
    assert await _priority(_caps(user_ubob=80), _body()) == 50


async def test_a_refusal_reads_the_policies_again_first() -> None:
    stub = _Stub(Policies())  # the cap was lifted since the cache was read
    assert await stub.priority(BOB, None, _body(priority=90), _caps(user_ubob=60)) == 90
    assert stub.reads == 1
