"""Per-endpoint counters: what the autoscaler reads and what Prometheus scrapes."""

from __future__ import annotations

from appproxy.metrics import InferenceLoad, ProxyMetrics


def test_counters_and_exposition() -> None:
    touched: list[str] = []
    metrics = ProxyMetrics(touched.append)
    a = metrics.counters.stats("s1", "jupyter")
    b = metrics.counters.stats("s2", "echo")
    assert metrics.counters.stats("s1", "jupyter") is a
    a.started()
    a.responded(0.003, 200)
    a.finished()
    a.started()  # still open
    b.started()
    b.failed()
    b.finished()
    snap = {(s.session_id, s.app): s for s in metrics.counters.snapshot()}
    assert (snap["s1", "jupyter"].requests, snap["s1", "jupyter"].in_flight) == (2, 1)
    assert (snap["s2", "echo"].failures, snap["s2", "echo"].in_flight) == (1, 0)
    assert touched == ["s1", "s1", "s2"]
    text = metrics.render().decode()
    assert 'jobgate_proxy_requests_total{app="jupyter",session="s1"} 2.0' in text
    assert 'jobgate_proxy_in_flight{app="jupyter",session="s1"} 1.0' in text
    assert 'jobgate_proxy_upstream_failures_total{app="echo",session="s2"} 1.0' in text
    assert 'jobgate_proxy_upstream_latency_seconds_bucket{app="jupyter",le="0.005"} 1.0' in text


def test_forget_keeps_busy_endpoints() -> None:
    metrics = ProxyMetrics(lambda session_id: None)
    busy = metrics.counters.stats("s1", "jupyter")
    busy.started()
    idle = metrics.counters.stats("s1", "echo")
    idle.started()
    idle.finished()
    metrics.counters.forget("s1")
    assert [(s.session_id, s.app) for s in metrics.counters.snapshot()] == [("s1", "jupyter")]


def test_inference_load_rate_and_exposition() -> None:
    metrics = ProxyMetrics(lambda session_id: None)
    load = InferenceLoad()
    metrics.add_inference(lambda: [("iris", load, 2)])
    assert load.rate(100.0) == 0.0  # one sample: no rate yet
    load.requests = 50
    assert load.rate(105.0) == 10.0
    load.requests = 150
    assert load.rate(115.0) == 10.0  # over the last ~10 s only (105 -> 115)
    load.in_flight, load.queued, load.rejected, load.held = 3, 4, 5, 6
    text = metrics.render().decode()
    assert 'jobgate_endpoint_requests_total{endpoint="iris"} 150.0' in text
    assert 'jobgate_endpoint_in_flight{endpoint="iris"} 3.0' in text
    assert 'jobgate_endpoint_queued{endpoint="iris"} 4.0' in text
    assert 'jobgate_endpoint_rejected_total{endpoint="iris"} 5.0' in text
    assert 'jobgate_endpoint_held_total{endpoint="iris"} 6.0' in text
    assert 'jobgate_endpoint_ready_replicas{endpoint="iris"} 2.0' in text
