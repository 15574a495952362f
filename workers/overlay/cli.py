"""The command line: ``python -m workers.overlay serve|tun``, what spawn() and attach()
run (see the package's docstring; the key never goes on a command line)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from workers.overlay.config import OverlayConfig, OverlayError
from workers.overlay.forwarder import Forwarder
from workers.overlay.sockets import Sockets
from workers.overlay.tun import tun_main


def _serve_detached(config: OverlayConfig) -> int:
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
    parser = argparse.ArgumentParser(prog="python -m workers.overlay", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    srv = sub.add_parser("serve", help="bind, fork, print 'pid N'; the child forwards")
    srv.add_argument("--config", required=True, choices=["-"], help="stdin: its JSON")
    srv.add_argument("--detach", required=True, action="store_true")
    srv.add_argument("--control", required=True, help="the config's, to be recognised by")
    tun = sub.add_parser("tun", help="make a TUN here and hand it to a forwarder")
    tun.add_argument("--ifname", required=True)
    tun.add_argument("--address", required=True, help="A.B.C.D/PREFIX")
    tun.add_argument("--mtu", type=int, required=True)
    tun.add_argument("--index", type=int, required=True)
    tun.add_argument("--control", required=True)
    tun.add_argument("--pid", type=int, required=True, help="let go of the TUN when it ends")
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
        config = OverlayConfig.from_json(sys.stdin.read())
    except (OSError, ValueError, TypeError) as exc:
        print(f"error: bad config: {exc}", flush=True)
        return 2
    if config.control != args.control:
        print(f"error: --control {args.control} is not the config's {config.control}", flush=True)
        return 2
    return _serve_detached(config)
