"""The forwarder's sockets: UDP on the node's address, the control socket receiving TUN
fds."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from typing import Any, Final

from workers.overlay.config import OverlayConfig, OverlayError

MAX_CLIENTS: Final = 16  # control connections waiting for their message
_IP_MTU_DISCOVER: Final = 10  # linux/in.h (not in typeshed's socket)
_IP_PMTUDISC_DONT: Final = 0


def resolve(host: str, port: int, family: int = 0) -> tuple[int, tuple[Any, ...]]:
    info = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    fam, _, _, _, sockaddr = info[0]
    return fam, sockaddr


class Sockets:
    """The forwarder's UDP socket and control socket, bound before it runs (and before a
    detached one forks, so that the caller hears of a port in use)."""

    def __init__(self, config: OverlayConfig) -> None:
        family, self.address = resolve(config.listen_host, config.listen_port)
        self.udp = socket.socket(family, socket.SOCK_DGRAM)
        try:
            for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                with contextlib.suppress(OSError):
                    self.udp.setsockopt(socket.SOL_SOCKET, opt, 4 << 20)
            if family == socket.AF_INET:  # let the underlay fragment what it must
                self.udp.setsockopt(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DONT)
            self.udp.bind(self.address)
            self.udp.setblocking(False)
            self.control, self.control_ino = _bind_control(config.control)
        except BaseException:
            self.udp.close()
            raise

    def close(self) -> None:
        self.udp.close()
        path = self.control.getsockname()
        self.control.close()
        with contextlib.suppress(OSError):
            st = os.stat(path)
            if (st.st_dev, st.st_ino) == self.control_ino:  # still ours
                os.unlink(path)


def _bind_control(path: str) -> tuple[socket.socket, tuple[int, int]]:
    """The control socket at *path*, mode 0600 (a stale one there is replaced), and its
    (device, inode)."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise OverlayError(f"control path {path} exists and is not a socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # a stale one, nobody listens there
            else:
                raise OverlayError(f"control socket {path} is in use")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        old = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        st = os.stat(path)
        sock.listen(MAX_CLIENTS)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock, (st.st_dev, st.st_ino)
