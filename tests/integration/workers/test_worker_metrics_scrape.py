"""A real worker's /metrics, scraped while it runs sessions on mock GPUs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import tomli_w
from harness import Stack, free_port
from prometheus_client.parser import text_string_to_metric_families
from waiting import until

GiB = 1024**3
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def scrape_until(
    url: str, ready: Callable[[Samples], bool], timeout: float = 30.0
) -> Samples:
    """Scrape until *ready* holds (counters follow events by a few milliseconds)."""
    async with httpx.AsyncClient() as http:

        async def samples() -> Samples | None:
            r = await http.get(url)
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/plain")
            got = parse(r.text)
            return got if ready(got) else None

        return await until(samples, timeout=timeout, interval=0.1, what=f"{url} ready")


async def test_worker_metrics_follow_devices_kernels_and_shipping(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    devices = tmp_path / "mock-devices.toml"
    devices.write_text(
        tomli_w.dumps(
            {
                "devices": [
                    {"kind": "cuda", "memory": "8GiB", "utilization": 42, "memory_used": "3GiB"}
                ],
                "cuda": {"mode": "fractional", "shares_per_device": 2},
            }
        )
    )
    monkeypatch.setenv("JOBGATE_MOCK_DEVICES", str(devices))
    stack.settings.allow_unenforced_fractions = True
    port = free_port()
    await stack.start_worker("n1", accelerators=["mock"], worker_metrics_port=port)
    url = f"http://127.0.0.1:{port}/metrics"
    gpu = {"node": "n1", "device": "mock-cuda-0"}

    got = await scrape_until(
        url, lambda s: value(s, "jobgate_worker_device_utilization_percent", **gpu) > 0
    )
    assert value(got, "jobgate_worker_device_utilization_percent", **gpu) == 42
    assert value(got, "jobgate_worker_device_memory_used_bytes", **gpu) == 3 * GiB
    assert value(got, "jobgate_worker_device_memory_total_bytes", **gpu) == 8 * GiB
    assert value(got, "jobgate_worker_kernels_running", node="n1") == 0
    assert value(got, "jobgate_worker_events_shipped_total", kind="registration") == 1

    gpu_job = {"cpu": "0.1", "cuda.shares": "0.5"}
    ok = await stack.submit(command=["sh", "-c", "echo hello"], resources=gpu_job)
    bad = await stack.submit(command=["sh", "-c", "echo oops >&2; exit 3"], resources=gpu_job)
    held = await stack.submit(command=["sleep", "600"], resources=gpu_job)
    await stack.wait_status(ok["id"], {"SUCCEEDED"})
    await stack.wait_status(bad["id"], {"FAILED"})
    await stack.wait_status(held["id"], {"RUNNING"})
    got = await scrape_until(
        url, lambda s: value(s, "jobgate_worker_kernel_exits_total", outcome="failed") == 1
    )
    assert value(got, "jobgate_worker_kernels_running", node="n1") == 1
    assert value(got, "jobgate_worker_kernel_starts_total", outcome="started") == 3
    assert value(got, "jobgate_worker_kernel_exits_total", outcome="succeeded") == 1
    assert value(got, "jobgate_worker_kernel_exits_total", outcome="failed") == 1
    assert value(got, "jobgate_worker_log_bytes_shipped_total", stream="stdout") == len("hello\n")
    assert value(got, "jobgate_worker_log_bytes_shipped_total", stream="stderr") == len("oops\n")

    async with stack.client() as api:
        await api.delete(f"/v1/sessions/{held['id']}")
    await stack.wait_status(held["id"], {"TERMINATED"})
    got = await scrape_until(
        url, lambda s: value(s, "jobgate_worker_kernel_exits_total", outcome="stopped") == 1
    )
    assert value(got, "jobgate_worker_kernel_exits_total", outcome="stopped") == 1
    assert value(got, "jobgate_worker_kernels_running", node="n1") == 0
    assert value(got, "jobgate_worker_events_shipped_total", kind="running") == 3
    assert value(got, "jobgate_worker_events_shipped_total", kind="exited") == 3
