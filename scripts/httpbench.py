#!/usr/bin/env python3
"""A tiny model-server stand-in for load tests: stdlib only, HTTP/1.1 with keep-alive.

    GET  /ping                      200 "ok" (or the status set by /_control/ping)
    POST /invocations               echo: {"replica", "hostname", "method", "path", "body",
                                    "headers"}
    GET  /stream?n=5&interval_ms=50 Server-Sent Events, chunked: n events "data: i"
    POST /_control/ping?status=500  make /ping answer that status from now on
    anything else                   the echo, as for /invocations
    ?delay_ms=N on any request      answer N ms later (a slow model)

Every answer names the replica (``--replica``, else ``$JOBGATE_REPLICA``, else the
host name) in its body and in ``X-Replica``. It prints ``listening on PORT`` once bound
(``--port 0`` picks a free port). It runs in the ``localhost/jobgate-httpbench`` test
image (scripts/build-test-images.sh), in tests and in ``benchmarks/endpoints.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
from urllib.parse import parse_qs, urlsplit

MAX_HEAD = 64 * 1024


class Server:
    def __init__(self, replica: str) -> None:
        self.replica = replica
        self.hostname = socket.gethostname()
        self.ping_status = 200

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self.exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD:
            return False
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = await read_body(reader, headers)
        keep = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        delay = float(query.get("delay_ms", "0")) / 1000
        if delay > 0:
            await asyncio.sleep(delay)
        if url.path == "/ping":
            await self.respond(writer, self.ping_status, b"ok\n", "text/plain", keep)
        elif url.path == "/_control/ping":
            self.ping_status = int(query.get("status", "200"))
            await self.respond(writer, 200, b"set\n", "text/plain", keep)
        elif url.path == "/stream":
            await self.stream(
                writer, int(query.get("n", "5")), float(query.get("interval_ms", "50"))
            )
            keep = False
        else:
            answer = {
                "replica": self.replica,
                "hostname": self.hostname,
                "method": method,
                "path": target,
                "body": body.decode("utf-8", "replace"),
                "headers": headers,
            }
            data = json.dumps(answer).encode()
            await self.respond(writer, 200, data, "application/json", keep, method == "HEAD")
        return keep

    async def respond(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        content_type: str,
        keep: bool,
        head_only: bool = False,
    ) -> None:
        reason = {200: "OK", 500: "Internal Server Error", 503: "Service Unavailable"}.get(
            status, "Status"
        )
        lines = [
            f"HTTP/1.1 {status} {reason}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            f"X-Replica: {self.replica}",
            "Connection: " + ("keep-alive" if keep else "close"),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + (b"" if head_only else body))
        await writer.drain()

    async def stream(self, writer: asyncio.StreamWriter, count: int, interval_ms: float) -> None:
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            f"Transfer-Encoding: chunked\r\nX-Replica: {self.replica}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode())
        for i in range(count):
            event = f"data: {i} {self.replica}\n\n".encode()
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            if i + 1 < count:
                await asyncio.sleep(interval_ms / 1000)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(length) if length else b""


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--replica", default=os.environ.get("JOBGATE_REPLICA", ""))
    args = parser.parse_args()
    server = Server(args.replica or socket.gethostname())
    listener = await asyncio.start_server(
        server.handle, args.host, args.port, limit=MAX_HEAD, backlog=1024
    )
    port = listener.sockets[0].getsockname()[1]
    print(f"listening on {port}", flush=True)
    serving = asyncio.ensure_future(listener.serve_forever())
    # PID 1 in a container gets no default SIGTERM action: stop as asked, at once
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, serving.cancel)
    try:
        await serving
    except asyncio.CancelledError:
        pass
    finally:
        listener.close()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
