"""Egress rules in a container's own network namespace (docs/security.md, Egress).

::

    create ─▶ init (netns made, process not yet running) ─▶ apply(pid, ruleset(...)) ─▶ start
                                                              nsenter -t PID -n nft -f -

The rootless Podman user owns every container's network namespace, so the rules live
there, out of the container's reach (it has no CAP_NET_ADMIN), and vanish with it. They
filter what the container *sends*: its own loopback and replies to connections made to
it (the proxy's, through its published ports) always pass. ``no-private`` then refuses
loopback, link-local, private, shared, multicast and reserved ranges, and this node's own
addresses (slirp4netns would connect to those from the node itself), except slirp's DNS
forwarder, the session's own cluster network and the group's ``egress_allow``.
``none`` refuses every new outbound connection. A refused connection fails at once
("No route to host"), not after a timeout.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterable
from ipaddress import IPv4Network, IPv6Network, collapse_addresses, ip_address, ip_network
from pathlib import Path
from typing import Final

from plugins.runtimes.nsenter import NsenterFailed, run_in_netns

__all__ = [
    "PRIVATE_V4",
    "PRIVATE_V6",
    "SLIRP_DNS",
    "EgressUnavailable",
    "apply",
    "available",
    "node_addresses",
    "ruleset",
]

#: what ``no-private`` refuses (besides the node's own addresses)
PRIVATE_V4: Final = (
    "0.0.0.0/8",
    "10.0.0.0/8",  # RFC 1918; slirp4netns' 10.0.2.2 is the node's loopback
    "100.64.0.0/10",  # carrier-grade NAT (RFC 6598)
    "127.0.0.0/8",
    "169.254.0.0/16",  # link-local, cloud metadata (169.254.169.254)
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
PRIVATE_V6: Final = (
    "::/127",  # unspecified and loopback
    "::ffff:0:0/96",  # IPv4-mapped: the same ranges, spelled in IPv6
    "64:ff9b::/96",  # NAT64 onto IPv4 (whatever it maps to)
    "fc00::/7",  # unique local (ULA)
    "fe80::/10",
    "ff00::/8",
)
#: slirp4netns' DNS forwarder (it asks the node's resolvers)
SLIRP_DNS: Final = "10.0.2.3"
_TABLE: Final = "jobgate_egress"


class EgressUnavailable(RuntimeError):
    """The rules could not be set: the container must not start."""


def available() -> bool:
    """Whether this node can set rules (``nft`` and ``nsenter`` on PATH)."""
    return shutil.which("nft") is not None and shutil.which("nsenter") is not None


def node_addresses(proc: Path = Path("/proc/net")) -> tuple[str, ...]:
    """This node's own addresses (IPv4 from the kernel's local routes, IPv6 per
    interface), as slirp4netns would reach them from the node."""
    found: set[str] = set()
    try:
        lines = (proc / "fib_trie").read_text().splitlines()
    except OSError:
        lines = []
    for before, line in itertools.pairwise(lines):
        if line.strip() == "/32 host LOCAL":
            found.add(before.split()[-1])
    try:
        for line in (proc / "if_inet6").read_text().splitlines():
            raw = line.split()[0]
            found.add(str(ip_address(":".join(raw[i : i + 4] for i in range(0, 32, 4)))))
    except (OSError, IndexError, ValueError):
        pass
    return tuple(sorted(found))


def _split(networks: Iterable[str]) -> tuple[list[str], list[str]]:
    """IPv4 and IPv6 networks apart, each collapsed (nft refuses overlapping set items)."""
    v4: list[IPv4Network] = []
    v6: list[IPv6Network] = []
    for text in networks:
        net = ip_network(text, strict=False)
        if isinstance(net, IPv4Network):
            v4.append(net)
        else:
            v6.append(net)
    return [str(n) for n in collapse_addresses(v4)], [str(n) for n in collapse_addresses(v6)]


def _set(items: list[str]) -> str:
    return "{ " + ", ".join(items) + " }"


def ruleset(
    mode: str,
    allow: Iterable[str] = (),
    own: Iterable[str] = (),
    *,
    peers: Iterable[str] = (),
    dns: Iterable[str] = (SLIRP_DNS,),
    links: Iterable[str] = (),
) -> str:
    """The nft script for *mode* (``no-private`` or ``none``).

    *allow*: the group's ``egress_allow``; *own*: the node's addresses; *peers*: networks
    the session's own containers share (a single-node cluster's network); *dns*: resolvers
    ``no-private`` still reaches on port 53; *links*: interfaces that lead only to the
    session's own containers (a multi-node session's overlay).
    """
    if mode not in ("no-private", "none"):
        raise ValueError(f"no rules for egress {mode!r}")
    rules = ['oifname "lo" accept', "ct state established,related accept"]
    rules += [f'oifname "{link}" accept' for link in links]
    peer4, peer6 = _split(peers)
    if peer4:
        rules.append(f"ip daddr {_set(peer4)} accept")
    if peer6:
        rules.append(f"ip6 daddr {_set(peer6)} accept")
    reject = "reject with icmpx type admin-prohibited"
    if mode == "none":
        rules.append(reject)
    else:
        dns4, _ = _split(f"{d}/32" for d in dns)
        if dns4:
            rules.append(f"ip daddr {_set(dns4)} meta l4proto {{ tcp, udp }} th dport 53 accept")
        allow4, allow6 = _split(allow)
        if allow4:
            rules.append(f"ip daddr {_set(allow4)} accept")
        if allow6:
            rules.append(f"ip6 daddr {_set(allow6)} accept")
        own4, own6 = _split(own)
        deny4, _ = _split([*PRIVATE_V4, *own4])
        _, deny6 = _split([*PRIVATE_V6, *own6])
        rules.append(f"ip daddr {_set(deny4)} {reject}")
        rules.append(f"ip6 daddr {_set(deny6)} {reject}")
    body = "\n".join(f"    {r}" for r in rules)
    return (
        f"table inet {_TABLE} {{\n"
        "  chain output {\n"
        "    type filter hook output priority filter; policy accept;\n"
        f"{body}\n"
        "  }\n"
        "}\n"
    )


async def apply(pid: int, script: str, *, timeout: float = 10.0) -> None:
    """Load *script* into the network namespace of process *pid* (a container created
    but not started); :class:`EgressUnavailable` saying why it could not."""
    try:
        await run_in_netns(
            pid,
            ["nft", "-f", "-"],
            what="loading the rules",
            stdin=script.encode(),
            timeout=timeout,
        )
    except NsenterFailed as exc:
        raise EgressUnavailable(str(exc)) from None
