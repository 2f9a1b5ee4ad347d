"""Worker metrics read the buffer on scrape and count tasks by recovery (a fresh registry per test)."""

from __future__ import annotations

from prometheus_client import generate_latest

from ftpipeline.obs.metrics import WorkerMetrics


def test_worker_metrics_follow_the_buffer_and_count_tasks() -> None:
    held = {"bytes": 100, "objects": 2}
    m = WorkerMetrics("p", "w1", lambda: held["bytes"], lambda: held["objects"])
    m.task_done(50, recovery=False)
    m.task_done(7, recovery=True)
    held["bytes"] = 4096
    text = generate_latest(m.registry).decode()
    assert 'ftpipeline_worker_buffer_bytes{pipeline="p",worker="w1"} 4096.0' in text
    assert 'ftpipeline_worker_buffer_objects{pipeline="p",worker="w1"} 2.0' in text
    assert 'ftpipeline_worker_tasks_total{pipeline="p",recovery="true",worker="w1"} 1.0' in text
    assert 'ftpipeline_worker_records_total{pipeline="p",worker="w1"} 57.0' in text


def test_pipelines_share_one_registry_in_the_operator() -> None:
    from prometheus_client import CollectorRegistry

    from ftpipeline.obs.metrics import RunMetrics

    registry = CollectorRegistry()
    a, b = RunMetrics("a", registry), RunMetrics("b", registry)
    a.steps.inc()
    b.recoveries.labels("b", "lineage", "applied").inc()
    text = generate_latest(registry).decode()
    assert 'ftpipeline_steps_committed_total{pipeline="a"} 1.0' in text
    assert 'ftpipeline_recoveries_total{outcome="applied",pipeline="b",strategy="lineage"} 1.0' in text
    assert RunMetrics("c").registry is not registry
