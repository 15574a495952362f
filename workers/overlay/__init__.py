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
                                   --control SOCK
                                   (under nsenter into the namespace holding the node's
                                   address): binds UDP and the control socket, forks,
                                   prints the pid; the forwarder logs to *log*
    attach(pid, control, ...)      nsenter -t PID -n [-U] python -m workers.overlay tun ...
                                   opens /dev/net/tun (TUNSETIFF IFF_TUN|IFF_NO_PI) in the
                                   container's netns, sets address, MTU, up (ioctls; IPv6
                                   off on it, best effort), then sends the fd and a pidfd
                                   of PID to the control socket with SCM_RIGHTS and
                                   {"index": i}; the forwarder answers {"ok": true} or
                                   {"error": "..."}
    stop(pid, control)             SIGTERM (SIGKILL after a grace), waited on by pidfd, if
                                   PID's command line names that control socket

    between forwarders: UDP datagrams, each an IPv4 packet sealed with ChaCha20-Poly1305
    behind a header (sender index, boot, counter); the format is wire.py's docstring

The package, by concern:

    config.py     OverlayError, Member, OverlayConfig (its JSON: what a forwarder is given)
    wire.py       the framing: header constants, Framer (HKDF, ChaCha20-Poly1305), the
                  replay windows
    sockets.py    the forwarder's UDP and control sockets, bound before it runs or forks
    forwarder.py  the forwarder: its selectors loop, Counts
    process.py    the worker's side: spawn(), stop(), is_forwarder()
    tun.py        attach() and the helper it runs: make the TUN, hand its fd over
    cli.py        main(): ``python -m workers.overlay serve|tun`` (__main__.py runs it)
"""

from __future__ import annotations

from workers.overlay.cli import main
from workers.overlay.config import Member, OverlayConfig, OverlayError
from workers.overlay.forwarder import Counts
from workers.overlay.process import is_forwarder, spawn, stop
from workers.overlay.tun import attach
from workers.overlay.wire import HEADER_LEN, MAC_LEN, OVERHEAD, REPLAY_WINDOW, Framer

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
    "spawn",
    "stop",
]
