"""The Podman runtime's egress rules, loaded by its own code into a network namespace
this test makes, against listeners in a second one (docs/security.md, Egress).

``inside`` plays a container's namespace: its only way out is a veth to ``outside``,
which holds every address a session might try: a private one (10.x, the cluster's LAN),
link-local metadata (169.254.169.254), an address the operator allows (192.168.77.2),
the node's own public address (203.0.113.9) and a public address elsewhere
(198.51.100.9). A listener on each answers with its own address.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from needs import missing

from plugins.runtimes.podman import egress

PRIVATE = "10.233.0.2"
METADATA = "169.254.169.254"
ALLOWED = "192.168.77.2"
NODE_OWN = "203.0.113.9"
PUBLIC = "198.51.100.9"
TARGETS = (PRIVATE, METADATA, ALLOWED, NODE_OWN, PUBLIC)
PORT = 18080

SERVE = f"""
import socket, sys, threading
def serve(addr):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, {PORT})); s.listen(16)
    while True:
        c, _ = s.accept(); c.sendall(addr.encode()); c.close()
for a in sys.argv[1:]:
    threading.Thread(target=serve, args=(a,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait(120)  # ends by itself
"""
PROBE = f"""
import json, socket, sys
out = {{}}
for a in sys.argv[1:]:
    try:
        with socket.create_connection((a, {PORT}), timeout=2) as c:
            out[a] = c.recv(64).decode()
    except OSError as e:
        out[a] = type(e).__name__ + ": " + (e.strerror or str(e))
print(json.dumps(out))
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def namespaces() -> Iterator[tuple[str, str]]:
    if os.geteuid() != 0 or not shutil.which("ip") or not egress.available():
        missing("egress rules need root, ip(8), nft(8) and nsenter(1)")
    tag = uuid.uuid4().hex[:6]
    inside, outside = f"jgeg-{tag}-in", f"jgeg-{tag}-out"
    _ip("netns", "add", inside)
    _ip("netns", "add", outside)
    try:
        _ip("link", "add", f"eg{tag}i", "type", "veth", "peer", "name", f"eg{tag}o")
        _ip("link", "set", f"eg{tag}i", "netns", inside)
        _ip("link", "set", f"eg{tag}o", "netns", outside)
        _ip("-n", inside, "addr", "add", "10.233.0.1/24", "dev", f"eg{tag}i")
        for address in TARGETS:
            prefix = "24" if address == PRIVATE else "32"
            _ip("-n", outside, "addr", "add", f"{address}/{prefix}", "dev", f"eg{tag}o")
        for ns, dev in ((inside, f"eg{tag}i"), (outside, f"eg{tag}o")):
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", inside, "route", "add", "default", "dev", f"eg{tag}i")
        yield inside, outside
    finally:
        for ns in (inside, outside):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def _in(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def _probe(ns: str, *targets: str) -> dict[str, str]:
    done = subprocess.run(
        _in(ns, sys.executable, "-c", PROBE, *targets),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, str] = json.loads(done.stdout)
    return result


def _reached(results: dict[str, str]) -> set[str]:
    return {a for a, said in results.items() if said == a}


def test_no_private_and_none_refuse_what_they_say_at_once_and_keep_replies(
    namespaces: tuple[str, str],
) -> None:
    inside, outside = namespaces
    server = subprocess.Popen(
        _in(outside, sys.executable, "-c", SERVE, *TARGETS),
        stdout=subprocess.PIPE,
        text=True,
    )
    # a process in "inside" whose namespace the rules go into, as a created container's
    holder = subprocess.Popen(_in(inside, "sleep", "120"))
    back = subprocess.Popen(  # a listener inside: what a published port leads to
        _in(inside, sys.executable, "-c", SERVE, "10.233.0.1"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        assert back.stdout is not None
        assert back.stdout.readline().strip() == "ready"
        pid = _holder_pid(holder.pid)

        # open (no rules): every listener answers, so each refusal below means the rules
        assert _reached(_probe(inside, *TARGETS)) == set(TARGETS)

        script = egress.ruleset("no-private", [f"{ALLOWED}/32"], ["127.0.0.1", NODE_OWN])
        asyncio.run(egress.apply(pid, script))
        results = _probe(inside, *TARGETS)
        assert _reached(results) == {ALLOWED, PUBLIC}, results
        for refused in (PRIVATE, METADATA, NODE_OWN):
            assert "No route to host" in results[refused], results  # at once, and saying so
        # connections made *to* the session still work (the proxy's, through a port)
        assert _reached(_probe(outside, "10.233.0.1")) == {"10.233.0.1"}

        subprocess.run(_in(inside, "nft", "delete", "table", "inet", "jobgate_egress"), check=True)
        asyncio.run(egress.apply(pid, egress.ruleset("none", [f"{ALLOWED}/32"])))
        assert _reached(_probe(inside, *TARGETS)) == set()
        assert _reached(_probe(outside, "10.233.0.1")) == {"10.233.0.1"}
    finally:
        for proc in (server, holder, back):
            proc.kill()
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()


def _holder_pid(pid: int) -> int:
    """`ip netns exec` enters the namespace, then execs its command in the same process:
    once that process is `sleep`, it is in the namespace."""
    for _ in range(500):  # bounded: 5 s
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() == "sleep":
                return pid
        time.sleep(0.01)
    raise AssertionError("the namespace's holder process never started")


def test_a_failed_load_is_an_error_that_says_why() -> None:
    if not egress.available():
        missing("nft(8) and nsenter(1)")
    with pytest.raises(egress.EgressUnavailable, match=r"nft failed|cannot run"):
        asyncio.run(egress.apply(2**22 + 7, egress.ruleset("none")))  # no such process
