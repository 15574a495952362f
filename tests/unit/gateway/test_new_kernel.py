"""The kernels a create answers with: each holds its own dicts, never one shared."""

from __future__ import annotations

from sqlalchemy.orm import configure_mappers

from gateway.db.models import Kernel, transient
from gateway.domain.status import KernelStatus
from gateway.services.sessions import new_kernel

DICTS = ("slots", "devices", "cpuset", "ports")


def test_a_new_kernel_holds_the_database_defaults() -> None:
    assert new_kernel() == {
        "status": KernelStatus.PENDING,
        "slots": {},
        "devices": {},
        "cpuset": {},
        "ports": {},
    }


def test_two_answers_share_no_dict() -> None:
    configure_mappers()  # as the first query does in the gateway
    first = transient(Kernel, {"id": "k1", "session_id": "s1"} | new_kernel())
    second = transient(Kernel, {"id": "k2", "session_id": "s2"} | new_kernel())
    for name in DICTS:
        assert getattr(first, name) is not getattr(second, name), name
    first.ports["jupyter"] = 8888
    first.slots["cpu"] = "1"
    assert (second.ports, second.slots) == ({}, {})
    assert new_kernel()["ports"] == {}
