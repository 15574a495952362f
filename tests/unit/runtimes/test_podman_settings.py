"""Operator settings from the worker's config and from JOBGATE_PODMAN_* variables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from plugins.runtimes.podman.settings import PodmanSettings


def test_socket_defaults_to_the_users_runtime_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBGATE_PODMAN_SOCKET", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1001")
    settings = PodmanSettings()
    assert settings.socket == "unix:///run/user/1001/podman/podman.sock"
    assert settings.socket_path == "/run/user/1001/podman/podman.sock"


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBGATE_PODMAN_SOCKET", "unix:///tmp/p.sock")
    monkeypatch.setenv("JOBGATE_PODMAN_ALLOWED_MOUNT_ROOTS", "/data:/scratch,/home")
    monkeypatch.setenv("JOBGATE_PODMAN_NETWORK", "none")
    monkeypatch.setenv("JOBGATE_PODMAN_CAP_ADD", '["CAP_KILL"]')
    monkeypatch.setenv("JOBGATE_PODMAN_USER", "jobgate")  # the scripts' variable: ignored here
    settings = PodmanSettings()
    assert settings.socket == "unix:///tmp/p.sock"
    assert settings.allowed_mount_roots == [Path("/data"), Path("/scratch"), Path("/home")]
    assert settings.network == "none"
    assert settings.cap_add == ["KILL"]


def test_tcp_socket_has_no_path() -> None:
    assert PodmanSettings(socket="tcp://127.0.0.1:8080").socket_path is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("socket", "/run/podman.sock", id="socket-without-scheme"),
        pytest.param("allowed_mount_roots", ["data"], id="relative-root"),
        pytest.param("network", "host", id="host-network"),
        pytest.param("publish_host_ip", "localhost", id="not-an-ip"),
        pytest.param("cap_add", ["sys_admin"], id="lower-case-cap"),
        pytest.param("cgroup_parent", "a/b", id="nested-cgroup-parent"),
        pytest.param("pids_limit", 0, id="zero-pids"),
        pytest.param("nofile", 10, id="tiny-nofile"),
        pytest.param("typo_field", 1, id="unknown-field"),
    ],
)
def test_bad_settings_are_refused(field: str, value: Any) -> None:
    with pytest.raises(ValidationError, match=field):
        PodmanSettings(**{field: value})
