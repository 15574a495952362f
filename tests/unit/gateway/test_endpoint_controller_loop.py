"""The endpoint controller's loop: a poke (wake, API write, a replica's new status) that
arrives while a tick runs is not lost: the next tick starts at once, not a tick later."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gateway.config import GatewaySettings
from gateway.loops.endpoint_controller import EndpointController


class _Leading:
    async def acquire(self) -> bool:
        return True

    async def release(self) -> None:
        return None


class _Controller(EndpointController):
    """Ticks counted instead of run; the first one is poked while it runs."""

    def __init__(self) -> None:
        super().__init__(cast(Any, None), cast(Any, None), cast(GatewaySettings, None), tick_s=3600)
        self.leader = cast(Any, _Leading())
        self.ticks = 0

    async def _listen(self) -> None:
        await asyncio.Event().wait()  # no Redis here: pokes come from the test

    async def tick(self) -> None:
        self.ticks += 1
        if self.ticks == 1:
            self._poked.set()  # e.g. the event consumer: a replica is RUNNING
        else:
            self.stop()


async def test_a_poke_during_a_tick_runs_the_next_tick_at_once() -> None:
    controller = _Controller()
    # with a one-hour tick, a lost poke would leave the loop waiting: the guard fails it
    await asyncio.wait_for(controller.run(), timeout=30)
    assert controller.ticks == 2
