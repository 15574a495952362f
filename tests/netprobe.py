"""Listeners and probes for the network-isolation tests (egress rules, tenant isolation).

``SERVE`` listens on each ``host:port`` of its arguments and answers every connection
with ``served by <host>``; ``PROBE`` connects to each ``host:port`` and prints one line,
``probe <container> <json>``: per target, the answer it got, or why it got none
("No route to host": refused by egress rules; "Connection refused": reached, nothing
listens; "Network is unreachable": no network). Both are plain Python so they run on the
host, in a test's network namespace or in a container of any image with ``python3``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

__all__ = ["PROBE", "SERVE", "answered", "parse_probes", "serving"]

SERVE = """
import socket, sys, threading
def serve(host, port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port)); s.listen(16)
    while True:
        c, _ = s.accept(); c.sendall(f"served by {host}".encode()); c.close()
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    threading.Thread(target=serve, args=(host, int(port)), daemon=True).start()
print("ready", flush=True)
threading.Event().wait(600)  # ends by itself
"""

PROBE = """
import json, os, socket, sys
out = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=3) as c:
            out[target] = c.recv(64).decode() or "answered"
    except OSError as e:
        out[target] = e.strerror or type(e).__name__
print("probe", os.environ.get("JOBGATE_CLUSTER_HOST", "alone"), json.dumps(out, sort_keys=True))
"""


@contextmanager
def serving(targets: Sequence[str], netns: str | None = None) -> Iterator[None]:
    """``SERVE`` on *targets* (in network namespace *netns*), ready, until the block ends."""
    argv = [sys.executable, "-c", SERVE, *targets]
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready", "the listeners did not start"
        yield
    finally:
        server.kill()
        server.wait(10)
        if server.stdout is not None:
            server.stdout.close()


def parse_probes(output: str) -> dict[str, dict[str, str]]:
    """Each probing container's results, from ``PROBE``'s lines in *output*."""
    found: dict[str, dict[str, str]] = {}
    for line in output.splitlines():
        if line.startswith("probe "):
            _, container, results = line.split(" ", 2)
            found[container] = json.loads(results)
    return found


def answered(results: dict[str, str]) -> set[str]:
    """The targets a listener answered (whichever: a NAT may lead one to another)."""
    return {target for target, said in results.items() if said.startswith("served by ")}
