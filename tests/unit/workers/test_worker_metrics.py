"""The node daemon's Prometheus metrics: outcomes, counters and the scrape-time gauges."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract.messages import KernelEvent, NodeInfo
from plugins.runtimes.base import KernelHandle, LogChunk
from workers.metrics import MetricsError, NodeView, WorkerMetrics, exit_outcome, start_outcome

GiB = 1024**3


def event(kind: str, **fields: Any) -> KernelEvent:
    return KernelEvent(kind=kind, kernel_id="k", session_id="s", node_id="n1", ts=0.0, **fields)


@pytest.mark.parametrize(
    ("ev", "start", "end"),
    [
        pytest.param(event("preparing"), None, None, id="preparing-counts-nothing"),
        pytest.param(event("progress", message="pulling"), None, None, id="progress"),
        pytest.param(event("running"), "started", None, id="running-is-a-start"),
        pytest.param(event("start_failed"), "failed", None, id="start-failed"),
        pytest.param(event("start_failed", deferred=True), "deferred", None, id="deferred"),
        pytest.param(event("not_started"), "cancelled", None, id="stopped-before-start"),
        pytest.param(event("exited", exit_code=0), None, "succeeded", id="exit-0"),
        pytest.param(event("exited", exit_code=3), None, "failed", id="exit-3"),
        pytest.param(
            event("exited", exit_code=143, requested_stop=True), None, "stopped", id="stopped"
        ),
        pytest.param(event("exited", exit_code=137, oom_killed=True), None, "oom_killed", id="oom"),
        pytest.param(
            event("exited", exit_code=137, oom_killed=True, requested_stop=True),
            None,
            "oom_killed",
            id="oom-wins-over-a-stop",
        ),
        pytest.param(event("lost"), None, "lost", id="lost-while-down"),
    ],
)
def test_outcomes(ev: KernelEvent, start: str | None, end: str | None) -> None:
    assert start_outcome(ev) == start
    assert exit_outcome(ev) == end


@dataclass
class FakeRun:
    handle: object
    done: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class FakeNode:
    """Stands in for a NodeAgent: the two attributes the collector reads."""

    kernels: dict[str, FakeRun]
    stats: list[dict[str, Any]]


def run(started: bool, ended: bool = False) -> FakeRun:
    r = FakeRun(KernelHandle("k", "s", "ref") if started else None)
    if ended:
        r.done.set()
    return r


def samples(metrics: WorkerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` from the exposition text."""
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def test_gauges_are_read_from_the_nodes_when_scraped() -> None:
    nodes: dict[str, NodeView] = {}
    metrics = WorkerMetrics(lambda: nodes)
    before = samples(metrics)
    assert not any(name.startswith("jobgate_worker_device") for name, _ in before)

    nodes["n1"] = FakeNode(
        {"a": run(True), "b": run(False), "c": run(True, ended=True)},
        [
            {
                "device_id": "gpu-0",
                "utilization": 42.5,
                "memory_used": 3 * GiB,
                "memory_total": 8 * GiB,
            },
            {"device_id": "gpu-1", "utilization": 0.0, "memory_used": 0, "memory_total": 16 * GiB},
        ],
    )
    nodes["n2"] = FakeNode({}, [])
    got = samples(metrics)
    gpu0 = (("device", "gpu-0"), ("node", "n1"))
    gpu1 = (("device", "gpu-1"), ("node", "n1"))
    assert got["jobgate_worker_device_utilization_percent", gpu0] == 42.5
    assert got["jobgate_worker_device_memory_used_bytes", gpu0] == 3 * GiB
    assert got["jobgate_worker_device_memory_total_bytes", gpu0] == 8 * GiB
    assert got["jobgate_worker_device_memory_total_bytes", gpu1] == 16 * GiB
    # one starting (no handle yet), one running, one ended: 1 running
    assert got["jobgate_worker_kernels_running", (("node", "n1"),)] == 1
    assert got["jobgate_worker_kernels_running", (("node", "n2"),)] == 0


def test_counters_start_at_zero_and_count_outcomes_events_and_bytes() -> None:
    metrics = WorkerMetrics(dict)
    got = samples(metrics)
    for outcome in ("started", "failed", "deferred", "cancelled"):
        assert got["jobgate_worker_kernel_starts_total", (("outcome", outcome),)] == 0
    for outcome in ("succeeded", "failed", "stopped", "oom_killed", "lost"):
        assert got["jobgate_worker_kernel_exits_total", (("outcome", outcome),)] == 0

    reported = [
        event("preparing"),
        event("running"),
        event("exited", exit_code=0),
        event("running"),
        event("exited", exit_code=1),
        event("start_failed"),
    ]
    for ev in reported:
        metrics.observe(ev)
    info = NodeInfo(
        node_id="n1", hostname="h", address="a", queue="q", runtime="process", capacity={}
    )
    metrics.observe(info)
    metrics.shipped([*reported, info])
    metrics.logs_shipped(
        [
            LogChunk("stdout", 0, b"hello\n"),
            LogChunk("stderr", 0, b"oops\n"),
            LogChunk("stdout", 6, b"world\n"),
        ]
    )
    got = samples(metrics)
    assert got["jobgate_worker_kernel_starts_total", (("outcome", "started"),)] == 2
    assert got["jobgate_worker_kernel_starts_total", (("outcome", "failed"),)] == 1
    assert got["jobgate_worker_kernel_exits_total", (("outcome", "succeeded"),)] == 1
    assert got["jobgate_worker_kernel_exits_total", (("outcome", "failed"),)] == 1
    assert got["jobgate_worker_events_shipped_total", (("kind", "running"),)] == 2
    assert got["jobgate_worker_events_shipped_total", (("kind", "registration"),)] == 1
    assert got["jobgate_worker_log_bytes_shipped_total", (("stream", "stdout"),)] == 12
    assert got["jobgate_worker_log_bytes_shipped_total", (("stream", "stderr"),)] == 5


async def test_a_taken_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        metrics = WorkerMetrics(dict)
        with pytest.raises(MetricsError, match=f"cannot listen on 127.0.0.1:{port}"):
            await metrics.serve("127.0.0.1", port)
        await metrics.close()
