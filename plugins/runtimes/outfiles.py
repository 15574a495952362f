"""A kernel's output as two files it writes (``KDIR/stdout``, ``KDIR/stderr``), and the
notices the worker leaves in its work directory: shared by the runtimes whose kernels
are processes writing to files the worker reads (``process``, on this host; ``slurm``,
on a file system the nodes share)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from plugins.runtimes.base import LogChunk, RuntimeFailure

__all__ = ["STREAMS", "tail_output", "write_notice"]

STREAMS = ("stdout", "stderr")


async def tail_output(
    kdir: Path,
    offsets: dict[str, int],
    read_size: int,
    finished: Callable[[], bool],
    idle: Callable[[], Awaitable[object]],
) -> AsyncIterator[LogChunk]:
    """Both streams from *offsets*, as they grow, until the kernel has *finished* and
    nothing is left to read; *idle* waits between reads that found nothing."""
    positions = {s: int(offsets.get(s, 0)) for s in STREAMS}
    with contextlib.ExitStack() as stack:
        files = {}
        for stream in STREAMS:
            (kdir / stream).touch(exist_ok=True)
            # files read in small pieces: not worth a thread per read
            files[stream] = stack.enter_context(open(kdir / stream, "rb"))  # noqa: ASYNC230
            files[stream].seek(positions[stream])
        while True:
            done = finished()  # before reading: what it wrote by its end is there by now
            got = False
            for stream, fh in files.items():
                data = fh.read(read_size)
                if data:
                    got = True
                    yield LogChunk(stream, positions[stream], data)  # type: ignore[arg-type]
                    positions[stream] += len(data)
            if not got:
                if done:
                    return
                await idle()


def write_notice(workdir: Path, name: str, text: str) -> None:
    """Into ``WORKDIR/.jobgate`` (``$HOME/.jobgate`` of the kernel), atomically."""
    notices = workdir / ".jobgate"
    try:
        notices.mkdir(parents=True, exist_ok=True)
        partial = notices / f".{name}.part"
        partial.write_text(text)
        partial.replace(notices / name)
    except OSError as exc:
        raise RuntimeFailure(f"writing the notice {name}: {exc}") from exc
