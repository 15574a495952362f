"""Helpers for the cluster-session tests (``test_cluster_sessions_podman.py``).

:class:`PodmanService` starts a rootless Podman API service of the Podman user's own on
a private socket, optionally inside a network namespace (a multi-node "node"), with the
netavark network backend that cluster sessions need. ``scripts/setup-podman.sh`` sets
netavark up for the shared service on a fresh machine; a host whose shared service was
started before (with CNI) still runs these tests through a service of their own.

:class:`NetnsPair` makes two network namespaces joined by a veth pair, with addresses
of the test's choosing, and removes them afterwards.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from waiting import until_sync

__all__ = ["NetnsPair", "PodmanService", "mpi_image_present"]

MPI = "localhost/jobgate-mpi:latest"


def _user_conf(home: Path) -> str:
    """The Podman user's containers.conf with the netavark backend."""
    path = home / ".config" / "containers" / "containers.conf"
    text = path.read_text() if path.exists() else ""
    if "network_backend" in text:
        return text
    return text + '\n[network]\nnetwork_backend = "netavark"\n'


@dataclass
class PodmanService:
    """``podman system service`` as the owner of *shared_socket*, on a socket of its own."""

    shared_socket: str
    netns: str | None = None
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="jobgate-pm-")))
    proc: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> str:
        return f"unix://{self.dir}/podman.sock"

    def start(self) -> str:
        owner = os.stat(self.shared_socket.removeprefix("unix://")).st_uid
        user = pwd.getpwuid(owner)
        os.chown(self.dir, owner, user.pw_gid)
        self.dir.chmod(0o755)
        conf = self.dir / "containers.conf"
        conf.write_text(_user_conf(Path(user.pw_dir)))
        conf.chmod(0o644)
        env = {
            "HOME": user.pw_dir,
            "USER": user.pw_name,
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "XDG_RUNTIME_DIR": f"/run/user/{owner}",
            "CONTAINERS_CONF": str(conf),
        }
        argv = [
            "setpriv",
            f"--reuid={owner}",
            f"--regid={user.pw_gid}",
            "--init-groups",
            "podman",
            "system",
            "service",
            "--time=0",
            self.socket,
        ]
        if self.netns is not None:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        with (self.dir / "service.log").open("wb") as log:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                cwd=user.pw_dir,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        path = str(self.dir / "podman.sock")
        proc = self.proc

        def listening() -> bool:
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
                s.connect(path)
                return True
            assert proc.poll() is None, f"podman service exited: {self._service_log()}"
            return False

        until_sync(
            listening,
            timeout=20,
            interval=0.1,
            what=lambda: f"podman service started: {self._service_log()}",
        )
        return self.socket

    def _service_log(self) -> str:
        return (self.dir / "service.log").read_text()[-2000:]

    def podman(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The podman CLI through this service (``--url``), as root."""
        return subprocess.run(
            ["podman", "--remote", "--url", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def mpi_image_present(shared_socket: str) -> bool:
    result = subprocess.run(
        ["podman", "--remote", "--url", shared_socket, "image", "exists", MPI],
        capture_output=True,
        timeout=30,
    )
    return result.returncode == 0


@dataclass
class NetnsPair:
    """Two network namespaces with a veth pair between them (addresses in 10.231.0.0/24)."""

    prefix: str
    names: tuple[str, str] = ("", "")
    addresses: tuple[str, str] = ("10.231.0.1", "10.231.0.2")

    def create(self) -> None:
        self.names = (f"{self.prefix}-a", f"{self.prefix}-b")
        a, b = self.names
        self._ip("netns", "add", a)
        self._ip("netns", "add", b)
        self._ip(
            "link", "add", f"{self.prefix}a", "type", "veth", "peer", "name", f"{self.prefix}b"
        )
        self._ip("link", "set", f"{self.prefix}a", "netns", a)
        self._ip("link", "set", f"{self.prefix}b", "netns", b)
        for ns, dev, addr in ((a, "a", self.addresses[0]), (b, "b", self.addresses[1])):
            self._ip("-n", ns, "addr", "add", f"{addr}/24", "dev", f"{self.prefix}{dev}")
            self._ip("-n", ns, "link", "set", f"{self.prefix}{dev}", "up")
            self._ip("-n", ns, "link", "set", "lo", "up")

    def remove(self) -> None:
        for ns in self.names:
            if ns:
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)
