"""A TUN into a container: attach() runs ``python -m workers.overlay tun`` there, which
makes the TUN (ioctls, no ip(8)) and hands its fd to the forwarder over SCM_RIGHTS."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import ipaddress
import json
import os
import socket
import struct
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from plugins.runtimes.nsenter import NsenterFailed, run_in_netns
from workers.overlay.config import OverlayError
from workers.overlay.process import helper_env

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
_HAND_OVER_S: Final = 5.0  # the forwarder's answer, at most


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
    argv = [sys.executable, "-m", "workers.overlay", "tun",
            "--ifname", ifname, "--address", f"{address}/{prefix}", "--mtu", str(mtu),
            "--index", str(index), "--control", control, "--pid", str(pid)]  # fmt: skip
    try:
        await run_in_netns(
            pid, argv, what=f"attaching {ifname} to process {pid}", env=helper_env(),
            timeout=timeout,
        )  # fmt: skip
    except NsenterFailed as exc:
        raise OverlayError(str(exc)) from None


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


def _hand_over(control: str, index: int, fds: Sequence[int]) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(_HAND_OVER_S)
        s.connect(control)
        socket.send_fds(s, [json.dumps({"index": index}).encode()], list(fds))
        reply = s.recv(4096)
    answer = json.loads(reply) if reply else {"error": "the forwarder closed without a word"}
    if not isinstance(answer, dict) or answer.get("ok") is not True:
        error = answer.get("error") if isinstance(answer, dict) else answer
        raise OverlayError(f"the forwarder refused member {index}: {error}")


def tun_main(args: argparse.Namespace) -> int:
    interface = ipaddress.IPv4Interface(args.address)
    opened: list[int] = []
    step = f"create {args.ifname}"
    try:
        opened.append(_make_tun(args.ifname, interface, args.mtu))
        step = f"open a pidfd of process {args.pid}"
        opened.append(os.pidfd_open(args.pid))
        step = f"hand {args.ifname} to {args.control}"
        _hand_over(args.control, args.index, opened)
    except (OSError, OverlayError, ValueError) as exc:
        print(f"overlay tun: {step}: {exc}", file=sys.stderr)
        return 1
    finally:
        for fd in opened:
            os.close(fd)
    return 0


def tun_name(fd: int) -> str | None:
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
