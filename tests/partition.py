"""A worker behind a link the test can cut: its own network namespace, a veth pair to
the host, and relays on the host's end of it to the gateway and Redis (which listen on
the host's loopback, out of the namespace's reach). Cutting the link is a partition as a
switch or a firewall makes one: an nftables table in the namespace drops every packet in
and out but loopback's, while both interfaces stay up - connections hang, nothing is
refused, the worker, its keeper and its kernels all live on and keep retrying. Needs
root (``ip netns``, ``nft``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import secrets
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["Link", "cut_off_link"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Link:
    namespace: str
    host_if: str
    host_address: str
    relays: list[asyncio.Server] = field(default_factory=list)
    _pipes: set[asyncio.Task[None]] = field(default_factory=set)
    # every stream a relay opened or accepted, closed (and waited for) by close(): a
    # stream left to the garbage collector warns in whichever later test it is freed
    _streams: set[asyncio.StreamWriter] = field(default_factory=set)
    _closed: bool = False

    def enter(self) -> list[str]:
        """The argv prefix that runs a command in the namespace."""
        return ["ip", "netns", "exec", self.namespace]

    async def relay(self, target_url: str) -> str:
        """*target_url* (``redis://127.0.0.1:P/0``, ``http://127.0.0.1:P``) as the
        namespace reaches it: the same URL on a relay at the host's end of the link."""
        parts = urlsplit(target_url)
        host, port = parts.hostname or "127.0.0.1", int(parts.port or 80)

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._streams.add(writer)
            try:
                up_reader, up_writer = await asyncio.open_connection(host, port)
            except OSError:
                writer.close()
                return
            self._streams.add(up_writer)
            if self._closed:  # the link closed while this connection was being made
                up_writer.close()
                writer.close()
                return
            for task in (
                asyncio.create_task(pipe(reader, up_writer)),
                asyncio.create_task(pipe(up_reader, writer)),
            ):
                self._pipes.add(task)
                task.add_done_callback(self._pipes.discard)

        server = await asyncio.start_server(serve, self.host_address, 0)
        self.relays.append(server)
        relay_port = server.sockets[0].getsockname()[1]
        netloc = parts.netloc.replace(
            f"{parts.hostname}:{parts.port}", f"{self.host_address}:{relay_port}"
        )
        return parts._replace(netloc=netloc).geturl()

    def cut(self) -> None:
        rules = (
            "table inet jobgate_cut {\n"
            " chain in { type filter hook input priority -300; policy drop; iif lo accept; }\n"
            " chain out { type filter hook output priority -300; policy drop; oif lo accept; }\n"
            "}\n"
        )
        subprocess.run(
            [*self.enter(), "nft", "-f", "-"], input=rules.encode(), check=True, timeout=30
        )

    def heal(self) -> None:
        subprocess.run([*self.enter(), "nft", "delete", "table", "inet", "jobgate_cut"],
                       check=True, timeout=30)  # fmt: skip

    async def close(self) -> None:
        self._closed = True
        for server in self.relays:
            server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        # a pipe cancelled before it first ran never reached its own close(), and one that
        # did may still hold bytes for a peer behind the cut: drop them
        streams = list(self._streams)
        for stream in streams:
            stream.transport.abort()
        await asyncio.gather(*(s.wait_closed() for s in streams), return_exceptions=True)
        for server in self.relays:
            await server.wait_closed()


@contextlib.asynccontextmanager
async def cut_off_link(tag: str | None = None) -> AsyncIterator[Link]:
    """A namespace ``jgp<tag>`` with a veth to the host: a /30 of 10.249.0.0/16 drawn at
    random (.1 here, .2 there), so runs side by side do not meet."""
    tag = tag or secrets.token_hex(3)
    namespace, host_if, inner_if = f"jgp{tag}", f"jgp{tag}h", f"jgp{tag}n"
    block = secrets.randbelow(256 * 64) * 4
    net = ipaddress.ip_network(f"10.249.{block // 256}.{block % 256}/30")
    host_address, inner_address = str(net[1]), str(net[2])
    _ip("netns", "add", namespace)
    link = Link(namespace, host_if, host_address)
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", inner_if)
        _ip("link", "set", inner_if, "netns", namespace)
        _ip("addr", "add", f"{host_address}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", namespace, "addr", "add", f"{inner_address}/30", "dev", inner_if)
        _ip("-n", namespace, "link", "set", inner_if, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        yield link
    finally:
        await link.close()
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("link", "del", host_if)
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", namespace)
