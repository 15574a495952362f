"""The forwarder: one per session and node, between its local TUNs and the other nodes.

A packet read from a local TUN must carry its member's own overlay source address (else
dropped: no spoofing another member); it goes to the member its destination names, on
this node straight to that TUN, elsewhere sealed to that member's node. A datagram is
delivered only if its sender index is a remote member's, it authenticates and is not a
replay, its source is that member's address and its destination a local member.
Nothing is translated: a peer sees the real overlay source address (Open MPI's TCP BTL
drops connections from addresses it does not know). IPv6 and anything not addressed to a
member are dropped.

The forwarder is one single-threaded ``selectors`` loop; each readiness reads at most
``_BURST`` packets, every wait is at most a second. It ends on SIGTERM/SIGINT, when no
TUN was attached ``idle_exit_s`` after the start, or when the last attached TUN has been
gone that long (a TUN is gone when its container's process exits - the pidfd - or its
device reads as gone). A TUN fd keeps its network namespace alive, so the forwarder lets
go of a container's TUN as soon as that process exits. It logs its start (listen address,
members) and its counts at the end (drops by reason: bad_tag, replay, dropped) to stderr,
never the key.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import logging
import os
import selectors
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import FrameType
from typing import Any, Final

from workers.overlay.config import OverlayConfig
from workers.overlay.sockets import MAX_CLIENTS, Sockets, resolve
from workers.overlay.tun import tun_name
from workers.overlay.wire import OVERHEAD, Framer, ipv4_ends, sender_index

log = logging.getLogger("workers.overlay")  # the package's, as before the split

_BURST: Final = 64  # packets read from one fd per readiness, before the others' turn
_CLIENT_WAIT_S: Final = 5.0  # a control connection's time to send it
_READ_MAX: Final = 65536


@dataclass
class Counts:
    tun_in: int = 0  # packets read from local TUNs
    tun_out: int = 0  # packets written to local TUNs
    udp_in: int = 0  # datagrams received
    udp_out: int = 0  # datagrams sent
    bad_tag: int = 0  # datagrams with a wrong version, length or tag (key, session, a bit)
    replay: int = 0  # datagrams seen before, or older than their sender's window (not
    # opened: a forged one with such a counter counts here too)
    dropped: int = 0  # not IPv4, not to a member, spoofed source or sender index, member
    # not attached
    errors: int = 0  # failed sends and writes

    def line(self) -> str:
        return " ".join(f"{k}={v}" for k, v in asdict(self).items())


@dataclass(eq=False)
class _Tun:
    index: int
    address: bytes
    fd: int
    pidfd: int
    name: str


@dataclass(eq=False)
class _Client:
    sock: socket.socket
    deadline: float


def _is_pidfd(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[pidfd]"
    except OSError:
        return False


class Forwarder:
    def __init__(self, config: OverlayConfig, sockets: Sockets) -> None:
        self.config = config
        self.udp = sockets.udp
        self.control = sockets.control
        self.mtu_max = config.mtu + OVERHEAD  # a longer datagram is no member's packet
        self.framer = Framer(config.key_bytes, config.session_id)
        self.counts = Counts()
        here = sockets.address[:2]
        self.local_members: dict[int, bytes] = {}  # index -> overlay address
        self.remote: dict[bytes, tuple[Any, ...]] = {}  # overlay address -> node sockaddr
        self.remote_index: dict[int, bytes] = {}  # remote member index -> overlay address
        for m in config.members:
            packed = ipaddress.IPv4Address(m.address).packed
            _, where = resolve(m.node_host, m.node_port, self.udp.family)
            if where[:2] == here:
                self.local_members[m.index] = packed
            else:
                self.remote[packed] = where
                self.remote_index[m.index] = packed
        self.attached: dict[bytes, _Tun] = {}  # overlay address -> its TUN
        self.clients: dict[int, _Client] = {}
        self.selector = selectors.DefaultSelector()
        self.stopping: str | None = None
        self.idle_since: float | None = time.monotonic()
        self._bad_logged: dict[str, float] = {}

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> Counts:
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        restore = self._signals(wake_w)
        try:
            self.selector.register(self.udp, selectors.EVENT_READ, self._from_udp)
            self.selector.register(self.control, selectors.EVENT_READ, self._accept)
            self.selector.register(wake_r, selectors.EVENT_READ, self._woken)
            self._log_start()
            while self.stopping is None:
                for key, _ in self.selector.select(self._timeout()):
                    key.data(key.fileobj)
                self._expire_clients()
                if self.idle_since is not None and (
                    time.monotonic() - self.idle_since >= self.config.idle_exit_s
                ):
                    self.stopping = f"idle {self.config.idle_exit_s:g} s without a TUN"
            log.info("overlay %s ends (%s): %s", self.config.session_id, self.stopping,
                     self.counts.line())  # fmt: skip
            return self.counts
        finally:
            restore()
            for tun in list(self.attached.values()):
                self._detach(tun, None)
            for client in list(self.clients.values()):
                client.sock.close()
            self.selector.close()
            wake_r.close()
            wake_w.close()

    def _signals(self, wake: socket.socket) -> Callable[[], None]:
        def _stop(signum: int, frame: FrameType | None) -> None:
            self.stopping = f"signal {signal.Signals(signum).name}"

        old = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGINT)}
        old_fd = signal.set_wakeup_fd(wake.fileno(), warn_on_full_buffer=False)

        def restore() -> None:
            signal.set_wakeup_fd(old_fd)
            for s, handler in old.items():
                signal.signal(s, handler)

        return restore

    def _timeout(self) -> float:
        wait = 1.0
        now = time.monotonic()
        if self.idle_since is not None:
            wait = min(wait, self.idle_since + self.config.idle_exit_s - now)
        for client in self.clients.values():
            wait = min(wait, client.deadline - now)
        return max(wait, 0.0)

    def _woken(self, sock: Any) -> None:
        with contextlib.suppress(OSError):
            sock.recv(4096)

    def _log_start(self) -> None:
        members = ", ".join(
            f"{m.index}={m.address} "
            + ("local" if m.index in self.local_members else f"via {m.node_host}:{m.node_port}")
            for m in sorted(self.config.members, key=lambda m: m.index)
        )
        log.info("overlay %s on udp %s:%d, control %s, mtu %d; members %s",
                 self.config.session_id, self.config.listen_host, self.config.listen_port,
                 self.config.control, self.config.mtu, members)  # fmt: skip

    # -- packets ----------------------------------------------------------------------------
    def _from_tun(self, tun: _Tun) -> None:
        if self.attached.get(tun.address) is not tun:
            return  # detached earlier in this round: its fd number may be another's now
        for _ in range(_BURST):
            try:
                packet = os.read(tun.fd, _READ_MAX)
            except BlockingIOError:
                return
            except OSError as exc:
                self._detach(tun, f"read failed: {exc.strerror or exc}")
                return
            self.counts.tun_in += 1
            ends = ipv4_ends(packet)
            if ends is None or ends[0] != tun.address:
                self.counts.dropped += 1
                continue
            dst = ends[1]
            if (peer := self.attached.get(dst)) is not None:
                self._to_tun(peer, packet)
            elif (where := self.remote.get(dst)) is not None:
                try:
                    self.udp.sendto(self.framer.seal(packet, index=tun.index), where)
                    self.counts.udp_out += 1
                except (OSError, OverflowError):  # OverflowError: 2**48 sent, never again
                    self.counts.errors += 1
            else:
                self.counts.dropped += 1

    def _from_udp(self, sock: Any) -> None:
        for _ in range(_BURST):
            try:
                frame = self.udp.recv(_READ_MAX)
            except BlockingIOError:
                return
            except OSError:
                self.counts.errors += 1
                return
            self.counts.udp_in += 1
            if len(frame) > self.mtu_max:
                self._bad("bad_tag")  # longer than any packet of ours: not opened
                continue
            index = sender_index(frame)
            source = self.remote_index.get(index)
            if source is None:
                self.counts.dropped += 1  # no remote member's: no window kept for it
                continue
            opened = self.framer.unseal(frame, index)
            if isinstance(opened, str):
                self._bad(opened)
                continue
            ends = ipv4_ends(opened)
            if ends is None or ends[0] != source:
                self.counts.dropped += 1
                continue
            if (tun := self.attached.get(ends[1])) is not None:
                self._to_tun(tun, opened)
            else:
                self.counts.dropped += 1

    def _to_tun(self, tun: _Tun, packet: bytes) -> None:
        try:
            os.write(tun.fd, packet)
            self.counts.tun_out += 1
        except OSError as exc:
            self.counts.errors += 1
            if exc.errno == errno.EBADFD:  # the device is gone
                self._detach(tun, "its device is gone")

    def _bad(self, reason: str) -> None:
        """Count a datagram unseal() refused, *reason* its Counts field."""
        count = getattr(self.counts, reason) + 1
        setattr(self.counts, reason, count)
        now = time.monotonic()
        if now - self._bad_logged.get(reason, -60.0) >= 60.0:  # a line a minute per reason
            self._bad_logged[reason] = now
            what = "with a wrong tag" if reason == "bad_tag" else "replayed or too old"
            log.warning("overlay %s: datagrams %s dropped (%d so far)",
                        self.config.session_id, what, count)  # fmt: skip

    # -- control ----------------------------------------------------------------------------
    def _accept(self, sock: Any) -> None:
        for _ in range(MAX_CLIENTS):
            try:
                conn, _ = self.control.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.counts.errors += 1
                return
            if len(self.clients) >= MAX_CLIENTS:
                conn.close()
                continue
            conn.setblocking(False)
            client = _Client(conn, time.monotonic() + _CLIENT_WAIT_S)
            self.clients[conn.fileno()] = client
            self.selector.register(conn, selectors.EVENT_READ, self._client_message)

    def _drop_client(self, conn: socket.socket) -> None:
        self.clients.pop(conn.fileno(), None)
        self.selector.unregister(conn)
        conn.close()

    def _expire_clients(self) -> None:
        now = time.monotonic()
        for client in [c for c in self.clients.values() if c.deadline <= now]:
            self._drop_client(client.sock)

    def _client_message(self, conn: socket.socket) -> None:
        try:
            data, fds, flags, _ = socket.recv_fds(conn, 4096, 2)
        except BlockingIOError:
            return
        except OSError:
            self._drop_client(conn)
            return
        try:
            reply = self._attach(data, fds, flags)
        except Exception as exc:  # a client's mistake never ends the forwarder
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        if "error" in reply:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        with contextlib.suppress(OSError):
            conn.send(json.dumps(reply).encode())
        self._drop_client(conn)

    def _attach(self, data: bytes, fds: list[int], flags: int) -> dict[str, Any]:
        if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
            return {"error": "message truncated"}
        message = json.loads(data)
        index = message.get("index") if isinstance(message, dict) else None
        if not isinstance(index, int) or isinstance(index, bool):
            return {"error": 'expected {"index": N}'}
        if index not in self.local_members:
            return {"error": f"member {index} is not one of this node's"}
        if len(fds) != 2:
            return {"error": "expected a TUN fd and a pidfd"}
        name = tun_name(fds[0])
        if name is None:
            return {"error": "the fd is not a TUN set up with IFF_TUN|IFF_NO_PI"}
        pidfd = fds[1]
        if not _is_pidfd(pidfd):
            return {"error": "the second fd is not a pidfd"}
        address = self.local_members[index]
        if (old := self.attached.get(address)) is not None:
            self._detach(old, "replaced")
        os.set_blocking(fds[0], False)
        tun = _Tun(index=index, address=address, fd=fds[0], pidfd=pidfd, name=name)
        self.attached[address] = tun
        self.selector.register(tun.fd, selectors.EVENT_READ, lambda _: self._from_tun(tun))
        self.selector.register(
            pidfd, selectors.EVENT_READ, lambda _: self._detach(tun, "its process ended")
        )
        self.idle_since = None
        log.info("overlay %s: member %d attached (%s, %s)", self.config.session_id, index,
                 name, ipaddress.IPv4Address(address))  # fmt: skip
        return {"ok": True}

    def _detach(self, tun: _Tun, why: str | None) -> None:
        if self.attached.get(tun.address) is not tun:
            return
        del self.attached[tun.address]
        for fd in (tun.fd, tun.pidfd):
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        if why is not None:
            log.info("overlay %s: member %d detached (%s)", self.config.session_id,
                     tun.index, why)  # fmt: skip
        if not self.attached:
            self.idle_since = time.monotonic()
