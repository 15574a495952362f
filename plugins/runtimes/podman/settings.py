"""Operator settings of the Podman runtime (environment prefix ``JOBGATE_PODMAN_``).

Every field comes from the environment of the worker, e.g.
``JOBGATE_PODMAN_SOCKET=unix:///run/user/1001/podman/podman.sock`` (the last line
``scripts/setup-podman.sh`` prints) or ``JOBGATE_PODMAN_ALLOWED_MOUNT_ROOTS=/data:/scratch``.
"""

from __future__ import annotations

import os
import re
from ipaddress import ip_address
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["DEFAULT_CAP_ADD", "PodmanSettings", "default_socket"]

#: What a container keeps after ``cap_drop=["ALL"]``: enough for package managers and
#: file ownership inside the image (CHOWN, DAC_OVERRIDE, FOWNER, FSETID, SETUID, SETGID),
#: signals (KILL) and low ports (NET_BIND_SERVICE). Podman's own default also keeps
#: SETPCAP, SETFCAP and SYS_CHROOT, which a job rarely needs.
DEFAULT_CAP_ADD = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "NET_BIND_SERVICE",
    "SETGID",
    "SETUID",
)
_CAP = re.compile(r"^(CAP_)?[A-Z_]+$")
_CGROUP_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def default_socket() -> str:
    """``unix://$XDG_RUNTIME_DIR/podman/podman.sock`` (``/run/user/UID`` without the variable)."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return f"unix://{runtime_dir}/podman/podman.sock"


class PodmanSettings(BaseSettings):
    """How this node runs containers; see ``docs/podman.md`` for the reasoning."""

    model_config = SettingsConfigDict(env_prefix="JOBGATE_PODMAN_", extra="forbid", frozen=True)

    #: The rootless API service: ``unix:///path`` (or ``tcp://host:port`` for tests).
    socket: str = Field(default_factory=default_socket)
    #: Host directories under which users may bind-mount; empty allows none.
    allowed_mount_roots: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    #: Processes per container when the spec gives none (None: no limit).
    pids_limit: int | None = Field(default=4096, ge=1)
    #: ``slirp4netns``: outbound network and published ports (~20 ms more per start
    #: than ``none``); ``none``: no network at all, so no published ports either.
    network: Literal["slirp4netns", "none"] = "slirp4netns"
    #: slirp4netns only: containers reach this host's loopback at 10.0.2.2 (an MLflow
    #: tracking server on 127.0.0.1, say). Every job then reaches every loopback service:
    #: for single-user machines and tests, not shared nodes.
    host_loopback: bool = False
    #: Host address published service ports bind to (the app proxy connects there).
    publish_host_ip: str = "127.0.0.1"
    #: Seconds ``podman stop`` (run by hand) waits before SIGKILL; the worker passes its own.
    stop_grace: float = Field(default=10.0, ge=0)
    #: ``ulimit -n`` inside containers (None: inherit the API service's limit).
    nofile: int | None = Field(default=None, ge=64)
    cap_drop: list[str] = Field(default_factory=lambda: ["ALL"])
    cap_add: list[str] = Field(default_factory=lambda: list(DEFAULT_CAP_ADD))
    #: Where a session's working directory (its own copy, on the node) is bind-mounted;
    #: the job starts there unless it names another --workdir.
    working_dir_target: str = "/home/work"
    #: Environment every container starts with; the session's own env wins.
    default_env: dict[str, str] = Field(default_factory=lambda: {"PYTHONUNBUFFERED": "1"})
    #: The cgroup v1 parent delegated to the Podman user (scripts/setup-podman.sh).
    cgroup_parent: str = "jobgate"
    #: Where cgroup file systems are mounted (a test points this at a fake tree).
    cgroup_root: Path = Path("/sys/fs/cgroup")
    #: A pull that reports nothing for this long ends with ImageNotFound.
    pull_stall_timeout: float = Field(default=30.0, gt=0)
    #: How often Podman checks a container's state where the runtime cannot watch the
    #: process itself (a remote socket); each waiting container costs ~0.1 % CPU at 0.25.
    wait_interval: float = Field(default=0.25, gt=0)
    #: Timeout of one short API call (create, start, inspect, ...).
    api_timeout: float = Field(default=30.0, gt=0)
    #: Threads for podman-py's blocking calls (streams do not use them).
    api_threads: int = Field(default=8, ge=1, le=128)

    @field_validator("allowed_mount_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):  # "/data:/scratch" or "/data,/scratch" from the environment
            return [p for p in re.split(r"[:,]", value) if p.strip()]
        return value

    @field_validator("allowed_mount_roots")
    @classmethod
    def _absolute_roots(cls, value: list[Path]) -> list[Path]:
        for root in value:
            if not root.is_absolute():
                raise ValueError(f"mount root must be an absolute path: {root}")
        return value

    @field_validator("socket")
    @classmethod
    def _socket_scheme(cls, value: str) -> str:
        if not value.startswith(("unix:///", "tcp://", "http://")):
            raise ValueError(f"socket must be unix:///path or tcp://host:port, not {value!r}")
        return value

    @field_validator("publish_host_ip")
    @classmethod
    def _ip(cls, value: str) -> str:
        ip_address(value)
        return value

    @field_validator("cap_drop", "cap_add")
    @classmethod
    def _caps(cls, value: list[str]) -> list[str]:
        for cap in value:
            if cap != "ALL" and not _CAP.match(cap):
                raise ValueError(f"not a capability name: {cap!r}")
        return [c.removeprefix("CAP_") for c in value]

    @field_validator("cgroup_parent")
    @classmethod
    def _cgroup_name(cls, value: str) -> str:
        if not _CGROUP_NAME.match(value):
            raise ValueError(f"cgroup parent must be one path component: {value!r}")
        return value

    @property
    def socket_path(self) -> str | None:
        """The file system path of a ``unix://`` socket, else None."""
        return self.socket.removeprefix("unix://") if self.socket.startswith("unix://") else None
