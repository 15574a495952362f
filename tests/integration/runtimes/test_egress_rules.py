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
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from needs import missing
from netprobe import PROBE, answered, parse_probes, serving

from plugins.runtimes.podman import egress

PRIVATE = "10.233.0.2"
METADATA = "169.254.169.254"
ALLOWED = "192.168.77.2"
NODE_OWN = "203.0.113.9"
PUBLIC = "198.51.100.9"
TARGETS = (PRIVATE, METADATA, ALLOWED, NODE_OWN, PUBLIC)
PORT = 18080


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


def _at(*hosts: str) -> set[str]:
    return {f"{h}:{PORT}" for h in hosts}


def _probe(ns: str, *hosts: str) -> dict[str, str]:
    """Each of *hosts* (on PORT) probed from namespace *ns*: what answered, or why not."""
    done = subprocess.run(
        _in(ns, sys.executable, "-c", PROBE, *sorted(_at(*hosts))),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (results,) = parse_probes(done.stdout).values()
    return results


def test_no_private_and_none_refuse_what_they_say_at_once_and_keep_replies(
    namespaces: tuple[str, str],
) -> None:
    inside, outside = namespaces
    # a process in "inside" whose namespace the rules go into, as a created container's
    holder = subprocess.Popen(_in(inside, "sleep", "120"))
    try:
        # the world outside, and a listener inside: what a published port leads to
        with (
            serving([f"{t}:{PORT}" for t in TARGETS], outside),
            serving([f"10.233.0.1:{PORT}"], inside),
        ):
            pid = _holder_pid(holder.pid)

            # open (no rules): every listener answers, so each refusal below means the rules
            assert answered(_probe(inside, *TARGETS)) == _at(*TARGETS)

            script = egress.ruleset("no-private", [f"{ALLOWED}/32"], ["127.0.0.1", NODE_OWN])
            asyncio.run(egress.apply(pid, script))
            results = _probe(inside, *TARGETS)
            assert answered(results) == _at(ALLOWED, PUBLIC), results
            for refused in (PRIVATE, METADATA, NODE_OWN):
                assert results[f"{refused}:{PORT}"] == "No route to host", (
                    results
                )  # at once, saying so
            # connections made *to* the session still work (the proxy's, through a port)
            assert answered(_probe(outside, "10.233.0.1")) == _at("10.233.0.1")

            delete = _in(inside, "nft", "delete", "table", "inet", "jobgate_egress")
            subprocess.run(delete, check=True)
            asyncio.run(egress.apply(pid, egress.ruleset("none", [f"{ALLOWED}/32"])))
            assert answered(_probe(inside, *TARGETS)) == set()
            assert answered(_probe(outside, "10.233.0.1")) == _at("10.233.0.1")
    finally:
        holder.kill()
        holder.wait(10)


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
    saying = r"loading the rules (failed \(1\)|: cannot run)"
    with pytest.raises(egress.EgressUnavailable, match=saying):
        asyncio.run(egress.apply(2**22 + 7, egress.ruleset("none")))  # no such process
