"""The inference balancer: power of two choices, per-replica limits, the bounded FIFO queue,
holding at zero; and the endpoint token check."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from appproxy.frontend.inference import token_allowed
from appproxy.inference.balancer import HOLD_AT_LEAST, Balancer, NoReplica, Overloaded, Replica
from appproxy.metrics import EndpointCounters, InferenceLoad
from contract.endpoints import EndpointRoute, ReplicaTarget, TokenGrant, token_digest

COUNTERS = EndpointCounters(lambda session_id: None)


def target(index: int, state: str, revision: int = 1) -> ReplicaTarget:
    return ReplicaTarget.model_validate(
        {
            "session_id": f"r{index}",
            "index": index,
            "revision": revision,
            "upstream": f"http://h:{index + 1}",
            "state": state,
        }
    )


def balancer(
    *states: str, concurrency: int = 2, queue_limit: int = 2, seed: int = 7, ready: bool = True
) -> tuple[Balancer, list[Replica], list[int]]:
    """A balancer over replicas r0, r1, … in the given states, all probed ready (or not)."""
    wakes: list[int] = []
    b = Balancer(
        InferenceLoad(),
        concurrency=concurrency,
        queue_limit=queue_limit,
        wake=lambda: wakes.append(1),
        rng=random.Random(seed),
    )
    targets = [target(i, s) for i, s in enumerate(states)]
    added, removed = b.update(targets, lambda sid: COUNTERS.stats(sid, "inference"))
    assert (len(added), removed) == (len(states), [])
    for replica in added:
        replica.ready = ready
    b.refresh()
    return b, added, wakes


async def test_p2c_prefers_the_less_loaded_and_spreads() -> None:
    b, (r0, r1, r2), _ = balancer("serving", "serving", "serving", concurrency=1000)
    r0.in_flight = 50
    picks = [b.pick() for _ in range(300)]
    # r0 only wins a pair it is not in: never, since both others are less loaded
    assert r0 not in picks
    assert {r1, r2} == set(picks)
    # with equal load, acquiring spreads evenly: after 300 slots nobody is far ahead
    r0.in_flight = 0
    for _ in range(300):
        await b.acquire(1.0)
    counts = sorted(r.in_flight for r in (r0, r1, r2))
    assert counts[-1] - counts[0] <= 5
    assert b.load.in_flight == 300


async def test_only_ready_serving_replicas_take_traffic() -> None:
    b, (serving, starting, draining, unready), _ = balancer(
        "serving", "starting", "draining", "serving"
    )
    unready.ready = False
    b.refresh()
    assert b.ready_count == 1
    assert {b.pick() for _ in range(20)} == {serving}
    # with no serving replica ready, a ready starting one answers (the first after zero)
    serving.ready = False
    b.refresh()
    assert {b.pick() for _ in range(20)} == {starting}
    serving.ready = True
    b.refresh()
    # a route change: draining keeps its object (and in-flight count), just no new work
    draining.in_flight = 1
    changed, removed = b.update(
        [target(0, "draining", revision=2), target(2, "serving")],
        lambda sid: COUNTERS.stats(sid, "inference"),
    )
    assert (changed, {r.session_id for r in removed}) == ([], {"r1", "r3"})
    assert b.replicas["r2"] is draining
    assert {b.pick() for _ in range(20)} == {draining}  # r2 now serving, r0 draining
    assert draining.in_flight == 1


async def test_limit_queue_fifo_and_overload() -> None:
    b, (r0,), wakes = balancer("serving", concurrency=2, queue_limit=2)
    emptied: list[int] = []
    b._emptied = lambda: emptied.append(b.load.queued)  # what the load reporter is told
    first = [await b.acquire(1.0), await b.acquire(1.0)]
    assert first == [r0, r0]
    waiting = [asyncio.create_task(b.acquire(5.0)) for _ in range(2)]
    await asyncio.sleep(0)
    assert b.load.queued == 2
    with pytest.raises(Overloaded):
        await b.acquire(1.0)
    assert b.load.rejected == 1
    # a slot frees: the first waiter gets it, not a newcomer
    b.release(r0)
    assert await waiting[0] is r0
    assert not waiting[1].done()
    assert emptied == []  # one still waits
    b.release(r0)
    assert await waiting[1] is r0
    assert (b.load.in_flight, b.load.queued, r0.in_flight) == (2, 0, 2)
    assert emptied == [0]  # told once, when the last one left the queue
    assert wakes == []  # a busy endpoint is not a sleeping one


async def test_queue_wait_runs_out_and_a_cancelled_waiter_leaves() -> None:
    b, (r0,), _ = balancer("serving", concurrency=1, queue_limit=5)
    await b.acquire(1.0)
    with pytest.raises(NoReplica) as caught:
        await b.acquire(0.05)
    assert caught.value.held is False
    task = asyncio.create_task(b.acquire(5.0))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert b.load.queued == 0
    b.release(r0)
    assert (r0.in_flight, b.load.in_flight) == (0, 0)


async def test_held_at_zero_until_a_replica_is_ready() -> None:
    b, (r0,), wakes = balancer("starting", queue_limit=0, ready=False)
    assert b.ready_count == 0
    held = [asyncio.create_task(b.acquire(5.0)) for _ in range(3)]
    await asyncio.sleep(0)
    # held even with queue_limit 0, and each held request asks for a wake-up (the
    # endpoint sends one per burst)
    assert (b.load.queued, b.load.held, len(wakes)) == (3, 3, 3)
    b.update(
        [target(0, "serving")],
        lambda sid: COUNTERS.stats(sid, "inference"),
    )
    r0.ready = True  # the prober's verdict
    b.refresh()
    await asyncio.sleep(0.01)
    # concurrency 2: two got slots at once, the third waits for a release
    assert [t.done() for t in held] == [True, True, False]
    b.release(r0)
    assert await held[2] is r0
    assert [t.result() for t in held] == [r0, r0, r0]
    empty, _, _ = balancer("starting", ready=False)
    with pytest.raises(NoReplica) as caught:
        await empty.acquire(0.01)
    assert caught.value.held is True
    full, _, _ = balancer("starting", queue_limit=0, ready=False)
    tasks = [asyncio.create_task(full.acquire(5.0)) for _ in range(HOLD_AT_LEAST)]
    await asyncio.sleep(0)
    with pytest.raises(Overloaded):
        await full.acquire(1.0)
    full.fail_waiters()
    for result in await asyncio.gather(*tasks, return_exceptions=True):
        assert isinstance(result, NoReplica)


def test_token_allowed_honours_digest_and_expiry() -> None:
    now = time.time()
    route = EndpointRoute(
        endpoint_id="e",
        name="iris",
        owner_id="u",
        tokens=(
            TokenGrant(id="a", digest=token_digest("jge_live")),
            TokenGrant(id="b", digest=token_digest("jge_old"), expires_at=now - 1),
            TokenGrant(id="c", digest=token_digest("jge_later"), expires_at=now + 60),
        ),
    )
    assert token_allowed(route, "jge_live", now)
    assert token_allowed(route, "jge_later", now)
    assert not token_allowed(route, "jge_old", now)
    assert not token_allowed(route, "jge_other", now)
    assert not token_allowed(route, token_digest("jge_live"), now)  # the digest is no token


async def test_each_replica_counts_the_requests_sent_to_it_for_its_rate() -> None:
    """`endpoints show` gives each replica's req/s: what this proxy sent it, over ~10 s."""
    b, (r0, r1), _ = balancer("serving", "serving", concurrency=1000)
    assert (r0.rate(100.0), r1.rate(100.0)) == (0.0, 0.0)  # the first sample: no rate yet
    for _ in range(40):
        b.release(await b.acquire(1.0))
    retried = b.try_acquire(exclude=r0)  # a retry elsewhere counts where it went
    assert retried is r1
    assert r0.taken + r1.taken == 41
    assert min(r0.taken, r1.taken) > 5  # p2c spreads them
    assert r0.rate(104.0) == r0.taken / 4
    assert r1.rate(104.0) == r1.taken / 4


async def test_try_admit_takes_a_free_slot_but_never_overtakes_the_queue() -> None:
    b, (r0,), _ = balancer("serving", concurrency=1, queue_limit=4)
    first = b.try_admit()  # the fast lane's slot: counted as acquire counts it
    assert first is r0
    assert (r0.in_flight, r0.taken, b.load.requests) == (1, 1, 1)
    assert b.try_admit() is None  # full: the request goes to acquire (and queues)
    waiter = asyncio.create_task(b.acquire(5.0))
    await asyncio.sleep(0)
    assert b.load.queued == 1
    b.release(r0)  # the slot goes to the waiter, not to a newcomer
    assert await waiter is r0
    b.release(r0)
    assert b.try_admit() is r0
    assert (b.load.requests, b.load.in_flight) == (3, 1)
    # nothing ready: no slot now (holding at zero is acquire's business)
    r0.ready = False
    b.refresh()
    b.release(r0)
    assert b.try_admit() is None
    assert b.load.requests == 3
