"""The pruning loops of every gateway process: one job, run every so often until cancelled.

::

    repeat(job, every_s, what)   (sleep first unless at_once) ─▶ job() ─▶ n deleted, logged
                                 a failure (of the kinds in *errors*) is logged, and the job
                                 runs again next round; anything else ends the loop
    cancelled (the gateway stops) ─▶ the round under way ends first (FINISH_S at most):
                                 a database call cancelled half-way can leave its
                                 connection's socket open (asyncpg #1156)

What each job deletes is its owner's: ``app.py`` composes them (unreferenced blobs:
``services/blobs.collect_garbage``; abandoned folder uploads: ``FolderFS.remove_stale_uploads``;
old hook deliveries: ``services/hooks.prune_deliveries``; old audit rows:
``services/audit.prune_audit``). The webhook deliverer prunes its
own tables inside its loop (``loops/deliverer.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

__all__ = ["FINISH_S", "RETENTION_EVERY_S", "repeat"]

log = logging.getLogger(__name__)

#: retention prunes (rows older than a number of days) run this often
RETENTION_EVERY_S = 60.0
#: how long a stop waits for the round under way before it cancels that too
FINISH_S = 10.0


async def repeat(
    job: Callable[[], Awaitable[int]],
    every_s: float,
    what: str,
    *,
    at_once: bool = False,
    errors: tuple[type[Exception], ...] = (Exception,),
) -> None:
    """Run *job* every *every_s* until cancelled (the first run at once or after one wait);
    log how many *what* it deleted, and a failure of the kinds in *errors*."""
    if not at_once:
        await asyncio.sleep(every_s)
    while True:
        try:
            deleted = await _finished_even_if_cancelled(job())
        except errors:
            log.exception("deleting %s failed; trying again next round", what)
        else:
            if deleted:
                log.info("deleted %d %s", deleted, what)
        await asyncio.sleep(every_s)


async def _finished_even_if_cancelled(work: Awaitable[int]) -> int:
    """``await work``; cancelled meanwhile, let it end (FINISH_S at most), then cancel."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        done, _ = await asyncio.wait({task}, timeout=FINISH_S)
        if not done:
            task.cancel()
        raise
