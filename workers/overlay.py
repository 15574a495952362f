"""A cluster session's rootless L3 overlay: one TUN per container, one forwarder per node.

::

    node A (its own address, e.g. 10.232.0.1)          node B (10.232.0.2)
    ┌──────────────────────────────────────────┐       ┌──────────────────────────────┐
    │ container 0 (own netns)   container 2    │       │ container 1 (own netns)      │
    │  jg0 10.254.0.1/24        jg0 10.254.0.3 │       │  jg0 10.254.0.2/24           │
    │    │ TUN fd                  │ TUN fd    │       │    │ TUN fd                  │
    │    ▼                         ▼           │       │    ▼                         │
    │  forwarder (session S, node A) ◀─────────┼─ UDP ─┼▶ forwarder (session S, B)    │
    │   local ↔ local: written straight across │       │   listen 10.232.0.2:PORT_B   │
    │   listen 10.232.0.1:PORT_A, control SOCK │       │                              │
    └──────────────────────────────────────────┘       └──────────────────────────────┘

    spawn(config, netns_pid, log)  python -m workers.overlay serve --config - --detach
                                   (under nsenter into the namespace holding the node's
                                   address): binds UDP and the control socket, forks,
                                   prints the pid; the forwarder logs to *log*
    attach(pid, control, ...)      nsenter -t PID -n [-U] python -m workers.overlay tun ...
                                   opens /dev/net/tun (TUNSETIFF IFF_TUN|IFF_NO_PI) in the
                                   container's netns, sets address, MTU, up (ioctls; IPv6
                                   off on it, best effort), then sends the fd (and a pidfd
                                   of PID) to the control socket with SCM_RIGHTS and
                                   {"index": i}; the forwarder answers {"ok": true} or
                                   {"error": "..."}
    stop(pid)                      SIGTERM (SIGKILL after a grace), waited on by pidfd

    on the wire (UDP):  header = version (1 byte, 2) ‖ sender index (2) ‖ boot (4)
                                 ‖ counter (6, big-endian)
                        header ‖ ChaCha20-Poly1305(K, nonce = header[1:13],
                                 associated data = header ‖ session_id) of the IPv4 packet
                        (ciphertext ‖ 16-byte tag): 29 bytes more than the packet
                        K = HKDF-SHA256(key, info = "jobgate-overlay/2 chacha20-poly1305\\0"
                                        session_id), never the session key itself

Encrypted and authenticated, with replay protection. The sender index is the member
whose TUN the packet came from; the boot is random per forwarder start; the counter
counts every datagram the forwarder sends, from 0, and it sends none past 2**48 - 1 (so
no nonce repeats, short of two starts drawing the same boot: 1 in 2**32 per pair). A
receiver keeps, per remote sender index, a 64-counter sliding window (highest counter and
a bitmap, as IPsec and WireGuard do) for each of that sender's last 4 boots it has seen:
a counter seen before or more than 64 below the highest is dropped as a replay. A boot it
has not seen (the sender restarted) starts a new window once a datagram of it
authenticates. Hence the one gap: datagrams of a boot this forwarder never saw (sent
before it started) or has forgotten (4 newer boots of that sender since) are accepted,
each once, if an attacker captured and replays them; the windows of the boots it knows
stop any replay of theirs. Measured cost: about 7 µs to seal and open a 1380-byte packet
on one core of a shared 2-core machine (the HMAC-only framing before it: about 4 µs),
small beside the Python loop and the syscalls around it.

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

CLI (the key never goes on a command line)::

    python -m workers.overlay serve --config FILE|- [--detach]
        FILE (or stdin for "-") holds OverlayConfig.to_json(); --detach binds, forks,
        prints "pid N" and returns (what spawn() runs)
    python -m workers.overlay tun --ifname jg0 --address 10.254.0.1/24 --mtu 1380
                                  --index 0 --control SOCK [--pid PID]
        (what attach() runs, inside the container's network namespace)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import fcntl
import ipaddress
import json
import logging
import os
import select
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import FrameType
from typing import Any, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "HEADER_LEN",
    "MAC_LEN",
    "OVERHEAD",
    "REPLAY_WINDOW",
    "Counts",
    "Framer",
    "Member",
    "OverlayConfig",
    "OverlayError",
    "attach",
    "is_forwarder",
    "main",
    "serve",
    "spawn",
    "stop",
]

log = logging.getLogger(__name__)

VERSION: Final = 2
MAC_LEN: Final = 16  # the Poly1305 tag, after the ciphertext
_BOOT_LEN: Final = 4
_HEADER: Final = struct.Struct("!BH4sHI")  # version, sender index, boot, 48-bit counter
HEADER_LEN: Final = _HEADER.size  # 13
OVERHEAD: Final = HEADER_LEN + MAC_LEN  # bytes a packet grows by on the wire: 29
REPLAY_WINDOW: Final = 64  # counters remembered below a sender boot's highest
_WINDOW_MASK: Final = (1 << REPLAY_WINDOW) - 1
_BOOTS_KEPT: Final = 4  # sender boots whose windows are kept, per sender index
_COUNTER_MAX: Final = (1 << 48) - 1
_DOMAIN: Final = b"jobgate-overlay/2 chacha20-poly1305\x00"
_BURST: Final = 64  # packets read from one fd per readiness, before the others' turn
_MAX_CLIENTS: Final = 16  # control connections waiting for their message
_CLIENT_WAIT_S: Final = 5.0  # a control connection's time to send it
_READ_MAX: Final = 65536

# linux/if_tun.h, linux/sockios.h, net/if.h
_TUNSETIFF: Final = 0x400454CA
_TUNGETIFF: Final = 0x800454D2
_IFF_TUN: Final = 0x0001
_IFF_NO_PI: Final = 0x1000
_IFF_UP: Final = 0x1
_SIOCGIFFLAGS: Final = 0x8913
_SIOCSIFFLAGS: Final = 0x8914
_SIOCSIFADDR: Final = 0x8916
_SIOCSIFNETMASK: Final = 0x891C
_SIOCSIFMTU: Final = 0x8922
_IP_MTU_DISCOVER: Final = 10  # linux/in.h (not in typeshed's socket)
_IP_PMTUDISC_DONT: Final = 0


class OverlayError(RuntimeError):
    """The overlay could not be set up: a forwarder that did not start, a TUN not attached."""


# -- configuration -------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Member:
    """One container of the session: its overlay address and its node's forwarder."""

    index: int
    address: str  # overlay IPv4, e.g. "10.254.0.2"
    node_host: str  # the forwarder of its node: address ...
    node_port: int  # ... and UDP port


@dataclass(frozen=True, kw_only=True)
class OverlayConfig:
    """One forwarder: a session on one node. ``listen_host``/``listen_port`` must be this
    node's address and port exactly as the members name them: members there are local."""

    session_id: str
    key: str = field(repr=False)  # hex of 32 bytes, the session's
    listen_host: str
    listen_port: int
    members: tuple[Member, ...]
    control: str  # unix socket receiving TUN fds
    mtu: int = 1380
    idle_exit_s: float = 120.0
    control_owner: int | None = None  # uid to chown the control socket to
    control_mode: int = 0o600

    def __post_init__(self) -> None:
        try:
            key = bytes.fromhex(self.key)
        except ValueError:
            key = b""
        if len(key) != 32:
            raise ValueError("key must be the hex of 32 bytes")
        if not 576 <= self.mtu <= 9000:
            raise ValueError(f"mtu {self.mtu} is not within 576..9000")
        if not 0 < self.listen_port < 65536:
            raise ValueError(f"listen_port {self.listen_port} is not a port")
        if self.idle_exit_s <= 0:
            raise ValueError("idle_exit_s must be positive")
        if not self.members:
            raise ValueError("a session has members")
        seen_index: set[int] = set()
        seen_address: set[str] = set()
        for m in self.members:
            address = ipaddress.ip_address(m.address)  # ValueError names it
            if address.version != 4 or address.is_multicast or address.is_unspecified:
                raise ValueError(f"member {m.index}: {m.address} is not a unicast IPv4")
            if m.index in seen_index or str(address) in seen_address:
                raise ValueError(f"member {m.index} ({m.address}) is listed twice")
            if not 0 < m.node_port < 65536:
                raise ValueError(f"member {m.index}: node_port {m.node_port} is not a port")
            seen_index.add(m.index)
            seen_address.add(str(address))

    @property
    def key_bytes(self) -> bytes:
        return bytes.fromhex(self.key)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OverlayConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown config fields: {sorted(unknown)}")
        members = tuple(Member(**m) for m in data.get("members", ()))
        return cls(**{**data, "members": members})

    @classmethod
    def from_json(cls, text: str | bytes) -> OverlayConfig:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the config is a JSON object")
        return cls.from_dict(data)


# -- the wire -------------------------------------------------------------------------------
class _Window:
    """The counters seen from one sender boot: the highest and a bitmap of the
    ``REPLAY_WINDOW`` below it (bit i: highest - i seen), as IPsec and WireGuard keep."""

    __slots__ = ("bits", "top")

    def __init__(self) -> None:
        self.top = -1
        self.bits = 0

    def fresh(self, counter: int) -> bool:
        """Whether *counter* is neither seen nor older than the window (changes nothing)."""
        if counter > self.top:
            return True
        behind = self.top - counter
        return behind < REPLAY_WINDOW and not (self.bits >> behind) & 1

    def mark(self, counter: int) -> None:
        if counter > self.top:
            shift = counter - self.top
            self.bits = ((self.bits << shift) | 1) & _WINDOW_MASK if shift < REPLAY_WINDOW else 1
            self.top = counter
        else:
            self.bits |= 1 << (self.top - counter)


class Framer:
    """Seals packets for the wire and opens what comes from it (one per forwarder: it holds
    the send counter of this forwarder's boot and the replay windows of its senders).

    The AEAD key is HKDF-SHA256 of the session key with a fixed label and the session id,
    never the session key itself. Each frame's nonce is sender index ‖ boot ‖ counter: the
    boot is random per Framer, the counter counts every frame it seals (whatever the index)
    and never wraps, so no nonce is used twice unless two boots of one sender draw the same
    4 random bytes (1 in 2**32 per pair of boots of a session's forwarder)."""

    def __init__(
        self, key: bytes, session_id: str, index: int = 0, *, boot: bytes | None = None
    ) -> None:
        if not 0 <= index < 1 << 16:
            raise ValueError(f"index {index} is not within 0..65535")
        self._session = session_id.encode()
        aead_key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=_DOMAIN + self._session
        ).derive(key)
        self._aead = ChaCha20Poly1305(aead_key)
        self.index = index
        self.boot = os.urandom(_BOOT_LEN) if boot is None else boot
        if len(self.boot) != _BOOT_LEN:
            raise ValueError(f"boot must be {_BOOT_LEN} bytes")
        self._next = 0  # the counter of the next frame sealed
        # sender index -> its boots' windows, the most recently used last
        self._windows: dict[int, dict[bytes, _Window]] = {}

    def seal(self, packet: bytes, *, index: int | None = None) -> bytes:
        """*packet* encrypted in a frame from member *index* (the Framer's own by default).
        Raises OverflowError once 2**48 frames were sealed: a new Framer (boot) must go on."""
        counter = self._next
        if counter > _COUNTER_MAX:
            raise OverflowError("the overlay's frame counter is spent")
        self._next = counter + 1
        header = _HEADER.pack(
            VERSION, self.index if index is None else index, self.boot,
            counter >> 32, counter & 0xFFFFFFFF,
        )  # fmt: skip
        return header + self._aead.encrypt(header[1:], packet, header + self._session)

    def unseal(self, frame: bytes) -> tuple[int, bytes] | str:
        """(sender index, packet) of *frame*, or why it is dropped: "bad_tag" (a wrong
        version, length, key, session or any changed bit) or "replay" (its counter was
        seen from that sender's boot, or is older than its window)."""
        if len(frame) <= OVERHEAD or frame[0] != VERSION:
            return "bad_tag"
        header = frame[:HEADER_LEN]
        _, index, boot, high, low = _HEADER.unpack(header)
        counter = high << 32 | low
        boots = self._windows.get(index)
        window = boots.get(boot) if boots is not None else None
        if window is not None and not window.fresh(counter):
            return "replay"  # known without the cost of opening it
        try:
            packet = self._aead.decrypt(header[1:], frame[HEADER_LEN:], header + self._session)
        except InvalidTag:
            return "bad_tag"
        # only now, authenticated, may it change what the window remembers
        if boots is None:
            boots = self._windows[index] = {}
        if window is None:
            window = boots[boot] = _Window()
            while len(boots) > _BOOTS_KEPT:  # forget the least recently used boot
                del boots[next(iter(boots))]
        elif next(reversed(boots)) != boot:
            boots[boot] = boots.pop(boot)
        window.mark(counter)
        return index, packet

    def open(self, frame: bytes) -> bytes | None:
        """The packet in *frame*, or None if it is refused (see unseal)."""
        opened = self.unseal(frame)
        return None if isinstance(opened, str) else opened[1]


def _ipv4_ends(packet: bytes) -> tuple[bytes, bytes] | None:
    """(source, destination) of an IPv4 packet, or None for anything else."""
    if len(packet) < 20 or packet[0] >> 4 != 4:
        return None
    return packet[12:16], packet[16:20]


# -- the forwarder --------------------------------------------------------------------------
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
    pidfd: int | None
    name: str


@dataclass(eq=False)
class _Client:
    sock: socket.socket
    deadline: float


def _resolve(host: str, port: int, family: int = 0) -> tuple[int, tuple[Any, ...]]:
    info = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    fam, _, _, _, sockaddr = info[0]
    return fam, sockaddr


def _tun_name(fd: int) -> str | None:
    """The interface name of a TUN fd set up with IFF_TUN|IFF_NO_PI, else None."""
    try:
        ifr = fcntl.ioctl(fd, _TUNGETIFF, bytes(40))
    except OSError:
        return None
    name: bytes
    flags: int
    name, flags = struct.unpack_from("16sH", ifr)
    if flags & (_IFF_TUN | _IFF_NO_PI) != _IFF_TUN | _IFF_NO_PI or flags & 0x0002:  # TAP
        return None
    return name.rstrip(b"\x00").decode(errors="replace")


def _is_pidfd(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[pidfd]"
    except OSError:
        return False


class _Sockets:
    """The forwarder's UDP socket and control socket, bound before it runs (and before a
    detached one forks, so that the caller hears of a port in use)."""

    def __init__(self, config: OverlayConfig) -> None:
        family, self.address = _resolve(config.listen_host, config.listen_port)
        self.udp = socket.socket(family, socket.SOCK_DGRAM)
        self.control: socket.socket | None = None
        self.control_ino: tuple[int, int] | None = None
        try:
            self.udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
            for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                with contextlib.suppress(OSError):
                    self.udp.setsockopt(socket.SOL_SOCKET, opt, 4 << 20)
            if family == socket.AF_INET:  # let the underlay fragment what it must
                self.udp.setsockopt(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DONT)
            self.udp.bind(self.address)
            self.udp.setblocking(False)
            self.control = self._bind_control(config)
        except BaseException:
            self.close(unlink=False)
            raise

    def _bind_control(self, config: OverlayConfig) -> socket.socket:
        path = config.control
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
            if config.control_owner is not None:
                os.chown(path, config.control_owner, -1)
            os.chmod(path, config.control_mode)
            st = os.stat(path)
            self.control_ino = (st.st_dev, st.st_ino)
            sock.listen(_MAX_CLIENTS)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock

    def close(self, *, unlink: bool = True) -> None:
        self.udp.close()
        if self.control is not None:
            path = self.control.getsockname()
            self.control.close()
            if unlink and self.control_ino is not None:
                with contextlib.suppress(OSError):
                    st = os.stat(path)
                    if (st.st_dev, st.st_ino) == self.control_ino:  # still ours
                        os.unlink(path)


class _Forwarder:
    def __init__(self, config: OverlayConfig, sockets: _Sockets) -> None:
        self.config = config
        self.sockets = sockets
        self.udp = sockets.udp
        if sockets.control is None:
            raise OverlayError("the control socket is not bound")
        self.control = sockets.control
        self.framer = Framer(config.key_bytes, config.session_id)
        self.counts = Counts()
        here = sockets.address[:2]
        self.local_members: dict[int, bytes] = {}  # index -> overlay address
        self.remote: dict[bytes, tuple[Any, ...]] = {}  # overlay address -> node sockaddr
        self.remote_index: dict[int, bytes] = {}  # remote member index -> overlay address
        for m in config.members:
            packed = ipaddress.IPv4Address(m.address).packed
            _, where = _resolve(m.node_host, m.node_port, self.udp.family)
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
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

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
            ends = _ipv4_ends(packet)
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
            if int.from_bytes(frame[1:3]) not in self.remote_index:
                self.counts.dropped += 1  # no remote member's: no window kept for it
                continue
            opened = self.framer.unseal(frame)
            if isinstance(opened, str):
                self._bad(opened)
                continue
            index, packet = opened
            ends = _ipv4_ends(packet)
            if ends is None or ends[0] != self.remote_index[index]:
                self.counts.dropped += 1
                continue
            if (tun := self.attached.get(ends[1])) is not None:
                self._to_tun(tun, packet)
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
        for _ in range(_MAX_CLIENTS):
            try:
                conn, _ = self.control.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.counts.errors += 1
                return
            if len(self.clients) >= _MAX_CLIENTS:
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
        if len(fds) not in (1, 2):
            return {"error": "expected a TUN fd (and a pidfd)"}
        name = _tun_name(fds[0])
        if name is None:
            return {"error": "the fd is not a TUN set up with IFF_TUN|IFF_NO_PI"}
        pidfd = fds[1] if len(fds) == 2 else None
        if pidfd is not None and not _is_pidfd(pidfd):
            return {"error": "the second fd is not a pidfd"}
        address = self.local_members[index]
        if (old := self.attached.get(address)) is not None:
            self._detach(old, "replaced")
        os.set_blocking(fds[0], False)
        tun = _Tun(index=index, address=address, fd=fds[0], pidfd=pidfd, name=name)
        self.attached[address] = tun
        self.selector.register(tun.fd, selectors.EVENT_READ, lambda _: self._from_tun(tun))
        if pidfd is not None:
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
            if fd is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(fd)
                with contextlib.suppress(OSError):
                    os.close(fd)
        if why is not None:
            log.info("overlay %s: member %d detached (%s)", self.config.session_id,
                     tun.index, why)  # fmt: skip
        if not self.attached:
            self.idle_since = time.monotonic()


def serve(config: OverlayConfig) -> Counts:
    """Run the forwarder of *config* until a signal or its idle time ends it: its counts.
    Signals are handled only when called in the main thread."""
    sockets = _Sockets(config)
    try:
        return _Forwarder(config, sockets).run()
    finally:
        sockets.close()


# -- spawn and stop (the worker's side) -----------------------------------------------------
def _same_ns(pid: int, kind: str) -> bool:
    theirs = os.stat(f"/proc/{pid}/ns/{kind}")
    ours = os.stat(f"/proc/self/ns/{kind}")
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def _nsenter(pid: int) -> list[str]:
    """nsenter into the network namespace of *pid*; through its user namespace too when
    we are not root (a rootless Podman user's namespaces belong to its user namespace)."""
    user = os.geteuid() != 0 and not _same_ns(pid, "user")
    extra = ["--user", "--preserve-credentials"] if user else []
    return ["nsenter", f"--target={pid}", "--net", *extra]


def _env() -> dict[str, str]:
    """The helpers' environment: what finds ip/nsenter and this package, nothing else
    (the worker's may hold credentials)."""
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def spawn(
    config: OverlayConfig,
    netns_pid: int | None,
    log_path: str | os.PathLike[str],
    *,
    timeout: float = 15.0,
) -> int:
    """Start the forwarder of *config*, detached, in the network namespace of *netns_pid*
    (ours when None or the same); it logs to *log_path* (appended, created 0600). Returns
    once its sockets are bound: its pid. Raises OverlayError saying why it did not start."""
    prefix = []
    if netns_pid is not None and not _same_ns(netns_pid, "net"):
        prefix = _nsenter(netns_pid)
    argv = [*prefix, sys.executable, "-m", "workers.overlay", "serve", "--config", "-",
            "--detach"]  # fmt: skip
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        done = subprocess.run(
            argv,
            input=config.to_json().encode(),
            stdout=subprocess.PIPE,
            stderr=fd,
            timeout=timeout,
            env=_env(),
            start_new_session=True,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OverlayError(f"the overlay forwarder did not start: {exc}") from exc
    finally:
        os.close(fd)
    said = done.stdout.decode(errors="replace").strip().splitlines()
    last = said[-1] if said else ""
    if done.returncode != 0 or not last.startswith("pid "):
        raise OverlayError(
            f"the overlay forwarder did not start ({done.returncode}): {last or 'no message'}"
            f" (log: {log_path})"
        )
    pid = int(last.split()[1])
    deadline = time.monotonic() + timeout
    while not _is_socket(config.control):  # bound before it forked: at once
        if time.monotonic() > deadline:
            raise OverlayError(f"the overlay forwarder {pid} has no control socket")
        time.sleep(0.01)
    return pid


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def is_forwarder(pid: int) -> bool:
    """Whether *pid* is a running forwarder (its command line says so)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\x00")
    except OSError:
        return False
    return b"workers.overlay" in cmdline and b"serve" in cmdline


def stop(pid: int, *, grace: float = 5.0) -> bool:
    """Stop the forwarder *pid* (SIGTERM, SIGKILL after *grace* seconds) and wait for it:
    whether it was running. A pid that is not a forwarder is left alone."""
    if not is_forwarder(pid):
        return False
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        if not is_forwarder(pid):  # the pid was reused between the two looks
            return False
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, sig)
            if select.select([pidfd], [], [], wait)[0]:
                return True
        raise OverlayError(f"the overlay forwarder {pid} did not end")
    finally:
        os.close(pidfd)


# -- attach: a TUN into a container -------------------------------------------------------
async def attach(
    pid: int,
    control: str,
    ifname: str,
    address: str,
    prefix: int,
    mtu: int,
    index: int,
    *,
    timeout: float = 15.0,
) -> None:
    """Make TUN *ifname* with *address*/*prefix* in the network namespace of process *pid*
    (a container created but not started) and hand it to the forwarder at *control* as
    member *index*. The forwarder lets go of it when *pid* ends."""
    argv = [*_nsenter(pid), sys.executable, "-m", "workers.overlay", "tun",
            "--ifname", ifname, "--address", f"{address}/{prefix}", "--mtu", str(mtu),
            "--index", str(index), "--control", control, "--pid", str(pid)]  # fmt: skip
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=_env(),
        )
    except OSError as exc:
        raise OverlayError(f"cannot attach {ifname} to process {pid}: {exc}") from exc
    try:
        _, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise OverlayError(f"attaching {ifname} to process {pid} took over {timeout:g} s") from None
    if proc.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        raise OverlayError(
            f"cannot attach {ifname} to process {pid} ({proc.returncode}): "
            f"{lines[-1] if lines else 'no message'}"
        )


def _ifreq(name: bytes, data: bytes = b"") -> bytes:
    return struct.pack("16s", name) + data.ljust(24, b"\x00")


def _sockaddr_in(address: ipaddress.IPv4Address) -> bytes:
    return struct.pack("=H2s4s8x", socket.AF_INET, b"\x00\x00", address.packed)


def _make_tun(ifname: str, interface: ipaddress.IPv4Interface, mtu: int) -> int:
    name = ifname.encode()
    if not 0 < len(name) < 16:
        raise OverlayError(f"bad interface name {ifname!r}")
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH22x", name, _IFF_TUN | _IFF_NO_PI))
        # IPv4 only: no link-local address, no router solicitations for the forwarder
        # to drop (best effort: a kernel without IPv6 has no such file)
        with contextlib.suppress(OSError):
            Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s, _SIOCSIFADDR, _ifreq(name, _sockaddr_in(interface.ip)))
            fcntl.ioctl(s, _SIOCSIFNETMASK, _ifreq(name, _sockaddr_in(interface.netmask)))
            fcntl.ioctl(s, _SIOCSIFMTU, _ifreq(name, struct.pack("i", mtu)))
            got = fcntl.ioctl(s, _SIOCGIFFLAGS, _ifreq(name))
            (flags,) = struct.unpack_from("H", got, 16)
            fcntl.ioctl(s, _SIOCSIFFLAGS, _ifreq(name, struct.pack("H", flags | _IFF_UP)))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _hand_over(control: str, index: int, fds: Sequence[int], timeout: float) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(timeout)
        s.connect(control)
        socket.send_fds(s, [json.dumps({"index": index}).encode()], list(fds))
        reply = s.recv(4096)
    answer = json.loads(reply) if reply else {"error": "the forwarder closed without a word"}
    if not isinstance(answer, dict) or answer.get("ok") is not True:
        error = answer.get("error") if isinstance(answer, dict) else answer
        raise OverlayError(f"the forwarder refused member {index}: {error}")


def _tun_main(args: argparse.Namespace) -> int:
    interface = ipaddress.IPv4Interface(args.address)
    opened: list[int] = []
    step = f"create {args.ifname}"
    try:
        opened.append(_make_tun(args.ifname, interface, args.mtu))
        if args.pid is not None:
            step = f"open a pidfd of process {args.pid}"
            opened.append(os.pidfd_open(args.pid))
        step = f"hand {args.ifname} to {args.control}"
        _hand_over(args.control, args.index, opened, args.timeout)
    except (OSError, OverlayError, ValueError) as exc:
        print(f"overlay tun: {step}: {exc}", file=sys.stderr)
        return 1
    finally:
        for fd in opened:
            os.close(fd)
    return 0


# -- CLI ------------------------------------------------------------------------------------
def _read_config(where: str) -> OverlayConfig:
    text = sys.stdin.read() if where == "-" else Path(where).read_text()
    return OverlayConfig.from_json(text)


def _detach_after_bind(config: OverlayConfig) -> int:
    """Bind, fork; the parent says "pid N" and exits 0, the child serves."""
    try:
        sockets = _Sockets(config)
    except (OSError, OverlayError) as exc:
        print(f"error: cannot bind: {exc}", flush=True)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child > 0:
        print(f"pid {child}", flush=True)
        os._exit(0)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # lets the caller's pipe end
    os.close(null)
    try:
        _Forwarder(config, sockets).run()
    finally:
        sockets.close()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workers.overlay",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    srv = sub.add_parser("serve", help="run a forwarder")
    srv.add_argument("--config", required=True, help='a JSON file, or "-" for stdin')
    srv.add_argument("--detach", action="store_true", help='bind, fork, print "pid N"')
    tun = sub.add_parser("tun", help="make a TUN here and hand it to a forwarder")
    tun.add_argument("--ifname", required=True)
    tun.add_argument("--address", required=True, help="A.B.C.D/PREFIX")
    tun.add_argument("--mtu", type=int, required=True)
    tun.add_argument("--index", type=int, required=True)
    tun.add_argument("--control", required=True)
    tun.add_argument("--pid", type=int, default=None, help="let go of the TUN when it ends")
    tun.add_argument("--timeout", type=float, default=5.0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "tun":
        return _tun_main(args)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s overlay[%(process)d] %(message)s",
    )
    try:
        config = _read_config(args.config)
    except (OSError, ValueError, TypeError) as exc:
        print(f"error: bad config: {exc}", file=sys.stdout if args.detach else sys.stderr)
        return 2
    if args.detach:
        return _detach_after_bind(config)
    serve(config)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
