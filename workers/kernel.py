"""One kernel's life on this node: prepare, start, stream output, report the exit, clean up.

::

    start_kernel job ─▶ launch(): preparing ─▶ prepare() ─▶ start() ─▶ running
                                                                      │
    re-attach after restart ─────────────────────────────────────▶ watch():
                                          logs ─▶ uploader ─▶ gateway   │
                                          wait() ─▶ flush output ─▶ exited ─▶ remove()

A start that fails is reported ``start_failed`` (the session ends ERROR); one the runtime
defers (:class:`~plugins.runtimes.base.StartDeferred`: not now) is ``start_failed`` with
``deferred`` set, and the gateway places the session again.

The exit is reported only after all output reached the gateway, so a client that sees
the session end has already seen every line it printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from contract.messages import KernelEvent, WireApp
from plugins.accelerators.base import ReservationError
from plugins.runtimes.base import (
    ExitStatus,
    KernelHandle,
    KernelSpec,
    Runtime,
    RuntimeFailure,
    StartDeferred,
)
from workers.secretfiles import remove_secret_files
from workers.shipper import KernelLogUploader, LogClient
from workers.state import KernelState, StateStore
from workers.workdir import WorkdirCache

if TYPE_CHECKING:
    from workers.reporter import EventReporter

__all__ = ["KernelRun", "NodeServices", "Refine"]

Refine = Callable[[KernelSpec], Awaitable[tuple[KernelSpec, list[WireApp]]]]

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 1.0


@dataclass
class NodeServices:
    """What a kernel needs from its node."""

    node_id: str
    runtime: Runtime
    reporter: EventReporter
    logs: LogClient
    store: StateStore
    #: working directories (None on sim hosts: the sim runtime ignores them)
    workdirs: WorkdirCache | None = None


class KernelRun:
    def __init__(self, node: NodeServices, state: KernelState) -> None:
        self.node = node
        self.state = state
        self.handle: KernelHandle | None = None
        self.apps: list[WireApp] = []
        self.cancelled = False
        #: why the worker stopped it, in place of the runtime's words (see :meth:`stop`)
        self.stop_reason: str | None = None
        self.done = asyncio.Event()
        self._last_progress = 0.0
        self._offsets_saved = 0.0

    def is_cancelled(self) -> bool:
        return self.cancelled

    # -- reporting --------------------------------------------------------------------
    def _event(self, kind: str, **fields: object) -> KernelEvent:
        event = KernelEvent(
            kind=kind,
            kernel_id=self.state.kernel_id,
            session_id=self.state.session_id,
            node_id=self.node.node_id,
            ts=time.time(),
            attempt=self.state.attempt,
            **fields,
        )
        self.node.reporter.report(event)
        return event

    def end(self, kind: str, **fields: object) -> None:
        """Report the attempt's last event and forget it, keeping the event in its
        tombstone (sent again with the next registration if Redis never got it)."""
        event = self._event(kind, **fields)
        self.node.store.delete(self.state.ref, event.model_dump_json())

    async def _progress(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            self._event("progress", message=message)

    # -- start ------------------------------------------------------------------------
    async def launch(self, spec: KernelSpec, refine: Refine | None = None) -> None:
        """Prepare and start; then watch until it exits. Never raises.

        *refine*, given the prepared spec (the image is here), may complete it: the apps
        an interactive session serves come from the image's labels.
        """
        self.node.store.save(self.state)
        self._event("preparing", message=f"preparing on {self.node.node_id}")
        try:
            await self.node.runtime.prepare(spec, self._progress)
            if refine is not None:
                spec, self.apps = await refine(spec)
            if self.cancelled:
                self._finish_unstarted("not_started", "cancelled before it started")
                return
            handle = await self.node.runtime.start(spec)
        except StartDeferred as exc:  # not now: the gateway places it again
            self._finish_unstarted("start_failed", str(exc), deferred=True)
            return
        except (RuntimeFailure, ReservationError) as exc:
            self._finish_unstarted("start_failed", str(exc))
            return
        except Exception as exc:
            log.exception("starting kernel %s failed", self.state.kernel_id)
            self._finish_unstarted("start_failed", f"the worker failed to start it: {exc}")
            return
        self.handle = handle
        self.state.phase = "running"
        self.node.store.save(self.state)
        self._event("running", ports=handle.ports, container_id=handle.ref, apps=self.apps)
        if self.is_cancelled():  # a stop arrived while it was starting
            await self.node.runtime.stop(handle, 0.0)
        await self.watch()

    def refuse(self, message: str) -> None:
        """It cannot start here at all (its devices cannot be reserved ...)."""
        self._finish_unstarted("start_failed", message)

    def _finish_unstarted(self, kind: str, message: str, deferred: bool = False) -> None:
        self.end(kind, message=message, deferred=deferred)
        self._release_working_dir()
        self.done.set()

    def _release_working_dir(self) -> None:
        if self.node.workdirs is not None:
            self.node.workdirs.release_now(self.state.ref)
            remove_secret_files(self.node.workdirs.root, self.state.ref)

    # -- watch ------------------------------------------------------------------------
    async def watch(self) -> None:
        assert self.handle is not None
        uploader = KernelLogUploader(
            self.node.logs,
            self.state.kernel_id,
            self.state.session_id,
            self._acked,
            self.state.attempt,
        )
        pump = asyncio.create_task(self._pump(uploader))
        try:
            status = await self.node.runtime.wait(self.handle)
        except Exception as exc:
            log.exception("waiting for kernel %s failed", self.state.kernel_id)
            status = ExitStatus(exit_code=255, reason=f"lost track of it: {exc}")
        try:
            await asyncio.wait_for(pump, 30.0)
        except TimeoutError:
            log.warning("output of kernel %s did not end 30s after exit", self.state.kernel_id)
        if not await uploader.finish():
            log.warning("some output of kernel %s could not be uploaded", self.state.kernel_id)
        self.end(
            "exited",
            exit_code=status.exit_code,
            oom_killed=status.oom_killed,
            message=self.stop_reason or status.reason,
            requested_stop=self.state.requested_stop,
            ended_at=status.ended_at,
        )
        with contextlib.suppress(Exception):
            await self.node.runtime.remove(self.handle)
        self._release_working_dir()
        self.done.set()

    async def _pump(self, uploader: KernelLogUploader) -> None:
        assert self.handle is not None
        try:
            async for chunk in self.node.runtime.logs(self.handle, dict(self.state.offsets)):
                await uploader.put(chunk)
        except Exception:
            log.exception("reading output of kernel %s failed", self.state.kernel_id)

    def _acked(self, offsets: dict[str, int]) -> None:
        self.state.offsets = offsets
        now = time.monotonic()
        if now - self._offsets_saved > 0.5:
            self._offsets_saved = now
            self.node.store.save(self.state)

    # -- stop -------------------------------------------------------------------------
    async def stop(
        self, grace: float, reason: str | None = None, notice: str | None = None
    ) -> None:
        """Stop it; *reason*, if given, is the reason its exit reports; *notice*, if given,
        is written to ``.jobgate/preempted`` in its home first (a preemption's)."""
        self.state.requested_stop = True
        self.stop_reason = reason
        self.node.store.save(self.state)
        if self.handle is None:
            self.cancelled = True
            return
        if notice is not None:
            try:
                await self.node.runtime.write_notice(self.handle, "preempted", notice)
            except RuntimeFailure as exc:  # it still gets its SIGTERM and grace period
                log.warning("preemption notice for %s: %s", self.state.kernel_id, exc)
        try:
            await self.node.runtime.stop(self.handle, grace)
        except RuntimeFailure as exc:
            log.warning("stopping kernel %s: %s", self.state.kernel_id, exc)
