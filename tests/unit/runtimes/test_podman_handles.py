"""KernelHandles rebuilt from what Podman reports, as a restarted worker needs them."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.runtimes.base import KernelHandle
from plugins.runtimes.podman.handles import handle_from_inspect, handle_from_row, host_ports

LABELS = {
    "jobgate.kernel": "k1",
    "jobgate.session": "s1",
    "jobgate.node": "n1",
    "jobgate.ports": "jupyter:http:8888,ssh:tcp:22",
    "jobgate.mem-limit": "67108864",
}


def row(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "Id": "c0ffee",
        "Labels": dict(LABELS),
        "State": "running",
        "StartedAt": 1795217766,
        "Ports": [
            {
                "host_ip": "127.0.0.1",
                "container_port": 8888,
                "host_port": 41234,
                "range": 1,
                "protocol": "tcp",
            },
        ],
    }
    return {**base, **overrides}


def test_a_running_kernel_from_the_list() -> None:
    assert handle_from_row(row()) == KernelHandle(
        kernel_id="k1",
        session_id="s1",
        ref="c0ffee",
        ports={"jupyter": 41234},  # ssh was not published: left out, not guessed
        started_at=1795217766.0,
        exited=False,
        extra={"mem_limit": 67108864, "state": "running"},
    )


@pytest.mark.parametrize(
    ("state", "exited"),
    [("running", False), ("paused", False), ("exited", True), ("stopped", True), ("created", True)],
)
def test_exited_follows_the_state(state: str, exited: bool) -> None:
    handle = handle_from_row(row(State=state, Ports=None))
    assert handle is not None
    assert (handle.exited, handle.extra["state"], handle.ports) == (exited, state, {})


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({}, id="no-labels"),
        pytest.param({"jobgate.node": "n1", "jobgate.kernel": "k1"}, id="no-session"),
    ],
)
def test_containers_that_are_not_kernels_are_skipped(labels: dict[str, str]) -> None:
    assert handle_from_row(row(Labels=labels)) is None


def test_a_started_kernel_from_inspect() -> None:
    data = {
        "Id": "c0ffee",
        "Config": {"Labels": {**LABELS, "jobgate.mem-limit": "junk"}},
        "State": {"Status": "running", "StartedAt": "2026-11-20T23:36:06.334285866Z"},
        "NetworkSettings": {
            "Ports": {
                "8888/tcp": [{"HostIp": "127.0.0.1", "HostPort": "41234"}],
                "22/tcp": [{"HostIp": "127.0.0.1", "HostPort": "41235"}],
                "9999/tcp": None,
            }
        },
    }
    handle = handle_from_inspect(data)
    assert (handle.kernel_id, handle.session_id, handle.ref, handle.exited) == (
        "k1",
        "s1",
        "c0ffee",
        False,
    )
    assert handle.ports == {"jupyter": 41234, "ssh": 41235}
    assert handle.started_at == pytest.approx(1795217766.334286)
    assert handle.extra == {"mem_limit": None, "state": "running"}


@pytest.mark.parametrize(
    ("started", "epoch"),
    [
        pytest.param("2026-11-20T23:36:06Z", 1795217766.0, id="no-fraction"),
        pytest.param("2026-11-20T23:36:06.5+01:00", 1795214166.5, id="offset"),
        pytest.param("0001-01-01T00:00:00Z", 0.0, id="never"),
        pytest.param("yesterday", 0.0, id="junk"),
    ],
)
def test_start_times(started: str, epoch: float) -> None:
    data = {"Id": "x", "Config": {}, "State": {"Status": "exited", "StartedAt": started}}
    assert handle_from_inspect(data).started_at == pytest.approx(epoch)


def test_host_ports_ignores_unpublished_and_junk() -> None:
    table = {
        "80/tcp": [{"HostPort": ""}],
        "x/tcp": [{"HostPort": "1"}],
        "81/udp": [{"HostPort": "9"}],
    }
    assert host_ports(table) == {81: 9}
    assert host_ports(None) == {}
