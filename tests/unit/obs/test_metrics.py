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
