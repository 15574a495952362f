"""Every process's metric names start with jobgate_, and the Grafana dashboard in docs/
uses only names some process exports (so renaming a metric breaks this, not the graphs)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from appproxy.metrics import ProxyMetrics
from gateway.metrics import ConsumerMetrics, HttpMetrics, SchedulerMetrics
from workers.metrics import WorkerMetrics

DASHBOARD = Path(__file__).parents[3] / "docs" / "grafana-jobgate.json"
SUFFIXES = ("", "_total", "_bucket", "_count", "_sum")


def exported() -> dict[str, str]:
    """Family name -> the process that exports it."""
    gateway = CollectorRegistry()
    HttpMetrics(gateway)
    ConsumerMetrics(gateway)
    registries = {
        "gateway": gateway,
        "scheduler": SchedulerMetrics().registry,
        "worker": WorkerMetrics(dict).registry,
        "proxy": ProxyMetrics(lambda session: None).registry,
    }
    return {
        family.name: process
        for process, registry in registries.items()
        for family in registry.collect()
    }


def test_every_name_has_the_prefix_and_its_process_part() -> None:
    names = exported()
    assert len(names) >= 20
    for name, process in names.items():
        # the event consumer's, and the usage counter (gateway and scheduler both close
        # usage records), are named for what they count
        shared = ("consumer", "usage")
        part = next((p for p in shared if name.startswith(f"jobgate_{p}_")), process)
        assert name.startswith(f"jobgate_{part}_"), name


def test_the_dashboard_only_uses_exported_series() -> None:
    names = exported()
    series = {f"{n}{s}" for n in names for s in SUFFIXES}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"\bjobgate_[a-z_]+", e)}
    assert used, "no queries found"
    assert used <= series, sorted(used - series)
    # and every process has a panel
    processes = {names[n] for n in names if any(u.startswith(n) for u in used)}
    assert processes == {"gateway", "scheduler", "worker", "proxy"}
