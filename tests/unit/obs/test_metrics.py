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


def exported_names() -> set[str]:
    """Every series name the runtime exports: run metrics (coordinator) and worker metrics (sidecars)."""
    from prometheus_client import CollectorRegistry

    from ftpipeline.obs.metrics import RunMetrics

    registry = CollectorRegistry()
    RunMetrics("p", registry)
    WorkerMetrics("p", "w0", lambda: 0, lambda: 0, registry)
    names = set()
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            names.add(name)
            if kind == "counter":
                names.add(name if name.endswith("_total") else f"{name}_total")
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def test_every_metric_the_dashboard_and_the_alerts_name_is_exported() -> None:
    import json
    import re
    from pathlib import Path

    chart = Path(__file__).resolve().parents[3] / "charts" / "ftpipeline"
    dashboard = json.loads((chart / "dashboards" / "ftpipeline.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [t["query"] for t in dashboard["templating"]["list"] if "query" in t and "ftpipeline_" in t["query"]]
    rules = (chart / "templates" / "prometheusrule.yaml").read_text()
    exprs += re.findall(r"expr: (.*)", rules)
    named = {m for e in exprs for m in re.findall(r"\bftpipeline_[a-z_]+", e)}
    assert len(named) >= 15, named
    missing = named - exported_names()
    assert not missing, f"named in the dashboard or alerts but exported by nothing: {sorted(missing)}"


def test_source_lag_is_a_gauge_per_pipeline_source_and_partition() -> None:
    from prometheus_client import CollectorRegistry

    from ftpipeline.obs.metrics import RunMetrics

    registry = CollectorRegistry()
    a, b = RunMetrics("ns/a", registry), RunMetrics("ns/b", registry)
    a.lag("clicks", 0, 120)
    a.lag("clicks", 3, 7)
    b.lag("clicks", 0, 1)
    a.lag("clicks", 0, 20)
    value = registry.get_sample_value
    assert value("ftpipeline_source_lag_records", {"pipeline": "ns/a", "source": "clicks", "partition": "0"}) == 20
    assert value("ftpipeline_source_lag_records", {"pipeline": "ns/a", "source": "clicks", "partition": "3"}) == 7
    assert value("ftpipeline_source_lag_records", {"pipeline": "ns/b", "source": "clicks", "partition": "0"}) == 1


def test_a_labelled_series_a_panel_rates_is_at_zero_before_its_first_event() -> None:
    """rate() and increase() need a sample before the event: a series born with it shows nothing."""
    from prometheus_client import CollectorRegistry

    from ftpipeline.obs.metrics import RunMetrics

    registry = CollectorRegistry()
    RunMetrics("ns/p", registry)
    value = registry.get_sample_value
    for strategy in ("lineage", "checkpoint", "restart"):
        assert value("ftpipeline_recovery_duration_seconds_count", {"pipeline": "ns/p", "strategy": strategy}) == 0
        assert value("ftpipeline_recoveries_total", {"pipeline": "ns/p", "strategy": strategy,
                                                     "outcome": "applied"}) == 0
    assert value("ftpipeline_checkpoints_total", {"pipeline": "ns/p", "outcome": "aborted"}) == 0


class _Recorder:
    """A range-query API that answers one finite point at exactly ``at`` and records the grid it was asked."""

    def __init__(self, at: float) -> None:
        self.at = at
        self.asked: list[tuple[float, float, float]] = []

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict[str, object]]:
        self.asked.append((start, end, step))
        points = [start + i * step for i in range(int((end - start) // step) + 1)]
        return [{"metric": {}, "values": [[t, "1" if t == self.at else "NaN"] for t in points]}]

    def label_values(self, label: str, match: str) -> list[str]:
        return ["ns/p"]


def test_the_dashboard_check_ends_its_points_at_the_end_it_is_given() -> None:
    """A run whose steps all commit in its last seconds shows its rates only at a point after them: the
    points are laid back from the end, so the last one is the end (a CI run's panels were empty without)."""
    from tests.e2e import dashboard

    recorder = _Recorder(at=1049.0)
    panels = dashboard.evaluate(recorder, "ns/p", start=1000.0, end=1049.0, step=5.0)
    assert all(p.series == 1 for p in panels)
    assert {(start, end) for start, end, _ in recorder.asked} == {(999.0, 1049.0)}
