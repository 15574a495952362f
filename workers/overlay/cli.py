"""The command line: ``python -m workers.overlay serve|tun``.

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
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from workers.overlay.config import OverlayConfig, OverlayError
from workers.overlay.forwarder import Forwarder, serve
from workers.overlay.sockets import Sockets
from workers.overlay.tun import tun_main


def _read_config(where: str) -> OverlayConfig:
    text = sys.stdin.read() if where == "-" else Path(where).read_text()
    return OverlayConfig.from_json(text)


def _detach_after_bind(config: OverlayConfig) -> int:
    """Bind, fork; the parent says "pid N" and exits 0, the child serves."""
    try:
        sockets = Sockets(config)
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
        Forwarder(config, sockets).run()
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
        return tun_main(args)
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
