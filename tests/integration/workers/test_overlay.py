"""The session overlay (workers/overlay/) on real kernels: TUNs in real network
namespaces, forwarders talking UDP over a veth between two "nodes".

::

    node A netns ─ veth 10.232.0.1/24 ════ 10.232.0.2/24 veth ─ node B netns
      forwarder A :PORT_A                                   forwarder B :PORT_B
        ├─ c1 netns: jg0 10.254.0.1 (member 0)                └─ c2 netns: jg0 10.254.0.2 (1)
        └─ c3 netns: jg0 10.254.0.3 (member 2)

Each container namespace is held by a ``sleep`` (the "container's process" attach() is
given); the forwarders are spawned into the node namespaces as the worker spawns them
into the Podman service's.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from needs import missing
from waiting import until_sync

from workers.overlay import (
    Framer,
    Member,
    OverlayConfig,
    OverlayError,
    attach,
    is_forwarder,
    spawn,
    stop,
)

NODE_A, NODE_B = "10.232.0.1", "10.232.0.2"
PORT_A, PORT_B = 47001, 47002
C1, C2, C3 = "10.254.0.1", "10.254.0.2", "10.254.0.3"
TCP_PORT, UDP_PORT = 18181, 18182

SERVE_TCP = f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {TCP_PORT})); s.listen(8); s.settimeout(60)  # ends by itself
print("ready", flush=True)
while True:
    c, peer = s.accept()
    with c:
        c.sendall(peer[0].encode())
"""
CONNECT = f"""
import socket, sys
try:
    with socket.create_connection((sys.argv[1], {TCP_PORT}), timeout=float(sys.argv[2])) as c:
        print(c.recv(64).decode())
except OSError as e:
    print("failed:", type(e).__name__, e)
"""
SERVE_UDP = f"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", {UDP_PORT}))
s.settimeout(10)  # ends by itself
print("ready", flush=True)
try:
    while True:
        data = s.recv(2048).decode()
        print(data, flush=True)
        if data == "good":
            break
except TimeoutError:
    print("timeout", flush=True)
"""
SEND_UDP = """
import socket, sys
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    for frame in sys.argv[3:]:
        s.sendto(bytes.fromhex(frame), (sys.argv[1], int(sys.argv[2])))
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _in(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def _holder_pid(proc: subprocess.Popen[bytes]) -> int:
    """`ip netns exec` execs its command in the same process: once it is `sleep`, it is
    in the namespace."""
    for _ in range(500):  # bounded: 5 s
        with open(f"/proc/{proc.pid}/comm") as f:
            if f.read().strip() == "sleep":
                return proc.pid
        time.sleep(0.01)
    raise AssertionError("the namespace's holder process never started")


@dataclass
class Net:
    ns: dict[str, str]  # "a", "b", "c1", "c2", "c3" -> netns name
    holders: dict[str, subprocess.Popen[bytes]]
    key: str
    dir: Path
    configs: dict[str, OverlayConfig] = field(default_factory=dict)
    forwarders: dict[str, int] = field(default_factory=dict)

    def pid(self, name: str) -> int:
        return self.holders[name].pid

    def log(self, node: str) -> str:
        return (self.dir / f"{node}.log").read_text()

    def connect(self, frm: str, to: str, timeout: float = 5.0) -> str:
        done = subprocess.run(
            _in(self.ns[frm], sys.executable, "-c", CONNECT, to, str(timeout)),
            capture_output=True,
            text=True,
            timeout=timeout + 30,
            check=True,
        )
        return done.stdout.strip()

    def alive(self, node: str) -> bool:
        """Whether forwarder *node* runs and answers on its control socket."""
        if not is_forwarder(self.forwarders[node], self.configs[node].control):
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(5)
            s.connect(self.configs[node].control)
            s.send(b"{}")
            return b"error" in s.recv(4096)

    def has_link(self, name: str) -> bool:
        done = subprocess.run(
            ["ip", "-n", self.ns[name], "link", "show", "jg0"], capture_output=True, timeout=30
        )
        return done.returncode == 0


def _members() -> list[Member]:
    return [
        Member(index=0, address=C1, node_host=NODE_A, node_port=PORT_A),
        Member(index=1, address=C2, node_host=NODE_B, node_port=PORT_B),
        Member(index=2, address=C3, node_host=NODE_A, node_port=PORT_A),
    ]


@pytest.fixture
def net() -> Iterator[Net]:
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("nsenter")):
        missing("the overlay test needs root, ip(8) and nsenter(1)")
    if not os.path.exists("/dev/net/tun"):
        missing("the overlay test needs /dev/net/tun")
    tag = uuid.uuid4().hex[:6]
    ns = {n: f"jgov-{tag}-{n}" for n in ("a", "b", "c1", "c2", "c3")}
    made: list[str] = []
    holders: dict[str, subprocess.Popen[bytes]] = {}
    # a short directory: unix socket paths are limited to 107 bytes
    work = Path(tempfile.mkdtemp(prefix="jgov-"))
    it = Net(ns=ns, holders=holders, key=os.urandom(32).hex(), dir=work)
    try:
        for name in ns.values():
            _ip("netns", "add", name)
            made.append(name)
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("link", "add", f"ov{tag}a", "type", "veth", "peer", "name", f"ov{tag}b")
        for node, address in (("a", NODE_A), ("b", NODE_B)):
            _ip("link", "set", f"ov{tag}{node}", "netns", ns[node])
            _ip("-n", ns[node], "addr", "add", f"{address}/24", "dev", f"ov{tag}{node}")
            _ip("-n", ns[node], "link", "set", f"ov{tag}{node}", "up")
        for name, netns in ns.items():
            holders[name] = subprocess.Popen(_in(netns, "sleep", "120"))
            _holder_pid(holders[name])
        for node, host, port in (("a", NODE_A, PORT_A), ("b", NODE_B, PORT_B)):
            config = OverlayConfig(
                session_id=f"sess-{tag}",
                key=it.key,
                listen_host=host,
                listen_port=port,
                members=tuple(_members()),
                control=str(work / f"{node}.sock"),
                idle_exit_s=60,
            )
            it.configs[node] = config
            it.forwarders[node] = spawn(config, it.pid(node), work / f"{node}.log")
        for name, node, index, address in (
            ("c1", "a", 0, C1),
            ("c2", "b", 1, C2),
            ("c3", "a", 2, C3),
        ):
            control = it.configs[node].control
            asyncio.run(attach(it.pid(name), control, "jg0", address, 24, 1380, index))
        yield it
    finally:
        for node, pid in it.forwarders.items():
            stop(pid, it.configs[node].control)
        for proc in holders.values():
            proc.kill()
            proc.wait(10)
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def _listener(ns: str, script: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        _in(ns, sys.executable, "-c", script), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    assert ready, "the listener did not start"
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _end(proc: subprocess.Popen[str]) -> str:
    """What the listener printed (it is killed if it has not ended within 15 s)."""
    try:
        out, _ = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=10)
    return out


def test_containers_reach_each_other_across_nodes_and_on_one_with_their_own_addresses(
    net: Net,
) -> None:
    inside = subprocess.run(
        ["ip", "-n", net.ns["c1"], "-o", "addr", "show", "jg0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert f"inet {C1}/24" in inside.stdout
    link = subprocess.run(
        ["ip", "-n", net.ns["c1"], "link", "show", "jg0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "mtu 1380" in link.stdout
    assert ",UP" in link.stdout

    server = _listener(net.ns["c2"], SERVE_TCP)
    try:
        # across nodes, and c2 saw c1's own overlay address: nothing is translated
        assert net.connect("c1", C2) == C1
        assert net.connect("c3", C2) == C3
    finally:
        server.kill()
        _end(server)
    server = _listener(net.ns["c1"], SERVE_TCP)
    try:
        assert net.connect("c3", C1) == C3  # on one node, through forwarder A alone
        assert net.connect("c2", C1) == C2  # and back the other way
    finally:
        server.kill()
        _end(server)


def _udp_packet(src: str, dst: str, port: int, payload: bytes) -> bytes:
    """An IPv4/UDP packet (UDP checksum 0: none, as IPv4 allows)."""
    length = 20 + 8 + len(payload)
    header = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, length, 1, 0, 64, 17, 0,
        bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))),
    )  # fmt: skip
    total = sum(struct.unpack("!10H", header))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    header = header[:10] + struct.pack("!H", ~total & 0xFFFF) + header[12:]
    return header + struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload


def test_a_forged_tampered_replayed_or_spoofed_datagram_is_dropped_and_counted(
    net: Net,
) -> None:
    session = net.configs["b"].session_id
    right = Framer(bytes.fromhex(net.key), session)  # as node a's forwarder for c1
    wrong = Framer(os.urandom(32), session)
    first = right.seal(_udp_packet(C1, C2, UDP_PORT, b"first"), index=0)
    tampered = bytearray(right.seal(_udp_packet(C1, C2, UDP_PORT, b"tampered"), index=0))
    tampered[-1] ^= 0x01  # the tag's last bit
    frames = [
        wrong.seal(_udp_packet(C1, C2, UDP_PORT, b"bad"), index=0),  # another key
        bytes(tampered),
        right.seal(_udp_packet(C1, C2, UDP_PORT, b"x" * 1400), index=0),  # over mtu: not opened
        right.seal(_udp_packet(C2, C2, UDP_PORT, b"spoofed"), index=0),  # a local member as source
        right.seal(_udp_packet(C3, C2, UDP_PORT, b"c3 as 0"), index=0),  # member 2's, index 0
        right.seal(_udp_packet(C2, C2, UDP_PORT, b"index 1"), index=1),  # c2's own, from outside
        first,
        first,  # replayed
        right.seal(_udp_packet(C1, C2, UDP_PORT, b"good"), index=0),  # proves the way is open
    ]
    listener = _listener(net.ns["c2"], SERVE_UDP)
    try:
        subprocess.run(
            _in(net.ns["a"], sys.executable, "-c", SEND_UDP, NODE_B, str(PORT_B),
                *(f.hex() for f in frames)),
            check=True,
            timeout=30,
        )  # fmt: skip
    finally:
        out = _end(listener)
    assert out.splitlines() == ["first", "good"]
    assert net.alive("b")
    stop(net.forwarders.pop("b"), net.configs["b"].control)
    log = net.log("b")
    counts = dict(kv.split("=") for kv in log.rsplit(": ", 1)[1].split())
    assert (counts["bad_tag"], counts["replay"]) == ("3", "1"), log
    assert int(counts["dropped"]) >= 3, log  # the spoofed source and sender indexes
    assert net.key not in log
    assert net.key not in net.log("a")


def test_a_container_loses_the_link_with_its_forwarder_and_lets_go_when_it_ends(
    net: Net,
) -> None:
    assert net.connect("c1", C2).startswith("failed")  # nobody listens there yet ...
    assert "Refused" in net.connect("c1", C2)  # ... refused by c2 itself: the link is up
    assert stop(net.forwarders.pop("b"), net.configs["b"].control)
    until_sync(lambda: not net.has_link("c2"), timeout=10, what="c2's jg0 gone")
    said = net.connect("c1", C2, timeout=2)
    assert said.startswith("failed"), said
    assert "Refused" not in said, said  # no answer at all: the link is gone

    # c3's process ends: forwarder A closes its TUN (which held c3's namespace)
    net.holders["c3"].kill()
    net.holders["c3"].wait(10)
    until_sync(lambda: not net.has_link("c3"), timeout=10, what="c3's jg0 gone")
    until_sync(
        lambda: "member 2 detached (its process ended)" in net.log("a"),
        timeout=10,
        what="forwarder A saying it let go of member 2",
    )
    assert net.has_link("c1")
    assert net.alive("a")  # c1 is still attached: A runs on


def _ask(control: str, message: bytes, fds: list[int]) -> str:
    """What the forwarder at *control* answers to *message* with *fds*."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(5)
        s.connect(control)
        socket.send_fds(s, [message], fds)
        answer: str = json.loads(s.recv(4096))["error"]
        return answer


def test_attach_says_why_it_failed_and_a_clients_mistakes_never_end_a_forwarder(
    net: Net,
) -> None:
    control_a = net.configs["a"].control
    # the forwarder refuses: c2's member is node b's
    with pytest.raises(OverlayError, match="member 1 is not one of this node's"):
        asyncio.run(attach(net.pid("c2"), control_a, "jg1", C2, 24, 1380, 1))
    with pytest.raises(OverlayError, match="member 7 is not one of this node's"):
        asyncio.run(attach(net.pid("c2"), control_a, "jg2", C2, 24, 1380, 7))
    # the helper fails before it reaches a forwarder
    with pytest.raises(OverlayError, match="create jg0"):  # c1 has a jg0 already
        asyncio.run(attach(net.pid("c1"), control_a, "jg0", C1, 24, 1380, 0))
    with pytest.raises(OverlayError, match="hand jg3"):
        asyncio.run(attach(net.pid("c1"), str(net.dir / "none.sock"), "jg3", C1, 24, 1380, 0))
    # what only a broken client sends, straight to the forwarder
    with open("/dev/null", "rb") as null:
        pidfd = os.pidfd_open(net.pid("c1"))
        try:
            assert "JSONDecodeError" in _ask(control_a, b"not json", [])
            assert "index" in _ask(control_a, b'{"index": "0"}', [])
            assert "a TUN fd and a pidfd" in _ask(control_a, b'{"index": 0}', [pidfd])
            assert "not a TUN" in _ask(control_a, b'{"index": 0}', [null.fileno(), pidfd])
        finally:
            os.close(pidfd)
    assert net.alive("a")
    server = _listener(net.ns["c1"], SERVE_TCP)
    try:
        assert net.connect("c3", C1) == C3  # c1 and c3 still attached, through A
    finally:
        server.kill()
        _end(server)


def test_only_the_forwarder_of_that_control_socket_is_recognised_and_stopped(net: Net) -> None:
    control_a, control_b = net.configs["a"].control, net.configs["b"].control
    assert os.stat(control_a).st_mode & 0o777 == 0o600
    pid_a = net.forwarders["a"]
    assert is_forwarder(pid_a, control_a)
    assert not is_forwarder(pid_a, control_b)  # another session's (or node's) forwarder
    assert not stop(pid_a, control_b)
    assert net.alive("a")
    # a stale pid, reused by a process that is no forwarder or that of another control
    for argv in (
        ["sleep", "60"],
        [sys.executable, "-c", "import time; time.sleep(60)", "workers.overlay", "serve",
         "--control", str(net.dir / "other.sock")],
    ):  # fmt: skip
        sleeper = subprocess.Popen(argv)
        try:
            assert not is_forwarder(sleeper.pid, control_a)
            assert not stop(sleeper.pid, control_a, grace=0.1)
            assert sleeper.poll() is None  # left alone
        finally:
            sleeper.kill()
            sleeper.wait(10)


def test_a_forwarder_with_no_tun_ends_by_itself() -> None:
    if os.geteuid() != 0:
        missing("the overlay test needs root")
    work = Path(tempfile.mkdtemp(prefix="jgov-"))
    try:
        with _bound_udp() as free_port:
            pass
        config = OverlayConfig(
            session_id="idle",
            key=os.urandom(32).hex(),
            listen_host="127.0.0.1",
            listen_port=free_port,
            members=(Member(index=0, address=C1, node_host="127.0.0.1", node_port=1),),
            control=str(work / "c.sock"),
            idle_exit_s=1,
        )
        started = time.monotonic()
        pid = spawn(config, None, work / "log")
        pidfd = os.pidfd_open(pid)
        try:
            assert select.select([pidfd], [], [], 10)[0], "the forwarder did not end"
        finally:
            os.close(pidfd)
        assert time.monotonic() - started < 8
        log = (work / "log").read_text()
        assert "ends (idle 1 s without a TUN)" in log
        assert not (work / "c.sock").exists()
        # the command line must name the config's control socket (what stop() checks)
        said = subprocess.run(
            [sys.executable, "-m", "workers.overlay", "serve", "--config", "-", "--detach",
             "--control", str(work / "other.sock")],
            input=config.to_json(), capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert said.returncode == 2
        assert "is not the config's" in said.stdout
        # a port in use: spawn says so
        with _bound_udp() as port:
            busy = OverlayConfig.from_dict({**json.loads(config.to_json()), "listen_port": port})
            with pytest.raises(OverlayError, match="cannot bind"):
                spawn(busy, None, work / "log")
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def _bound_udp() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        yield port
