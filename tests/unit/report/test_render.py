"""The report page: plotly's traces and marks for what the timeline holds, and a page that needs no network."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from plotly.offline import get_plotlyjs

from ftpipeline.report.figures import graph_figure, recovery_hover, timeline_figure
from ftpipeline.report.render import headline, page, write_report
from ftpipeline.report.timeline import Timeline
from ftpipeline.spec.model import PipelineSpec

from .conftest import Clock, play


def _snap(spec: PipelineSpec, clock: Clock) -> dict[str, Any]:
    timeline = Timeline(spec, clock=clock)
    play(timeline, clock)
    return timeline.snapshot()


def _shapes(fig: Any, prefix: str) -> list[Any]:
    return [s for s in fig.layout.shapes if (s.name or "").startswith(prefix)]


def test_the_timeline_figure_has_a_trace_for_each_kind_of_event(spec: PipelineSpec, clock: Clock) -> None:
    fig = timeline_figure(_snap(spec, clock))
    names = [t.name for t in fig.data]
    assert names == ["step duration", "rows per step", "recovery", "checkpoint", "checkpoint aborted",
                     "zookeeper outage", "starting workers", "workers"]
    duration = fig.data[0]
    assert list(duration.y) == [0.5, 0.5, 1.45, 0.4, 0.4]
    assert list(fig.data[1].y) == [3000, 3000, 2500, 3000, 3000]
    commits = list(fig.data[1].x)  # bars most of the usual gap between commits wide
    gaps = sorted(b - a for a, b in zip(commits, commits[1:]))
    assert fig.data[1].width == 0.7 * gaps[len(gaps) // 2]
    # every row shares the one time axis
    assert fig.layout.xaxis.matches == fig.layout.xaxis2.matches == "x3"  # the bottom row's


def test_a_recovery_is_a_band_from_detection_to_the_next_commit_with_its_figures(spec: PipelineSpec,
                                                                                clock: Clock) -> None:
    snap = _snap(spec, clock)
    fig = timeline_figure(snap)
    [band] = _shapes(fig, "recovery")
    r = snap["recoveries"][0]
    assert (band.x0, band.x1, band.yref) == (r["detected"], r["next_commit"], "paper")
    [label] = [a for a in fig.layout.annotations if a.name == "recovery-label"]
    assert label.text == "recovery of w1 (lineage)"
    hover = recovery_hover(r)
    for part in ("recovery of w1", "lineage", "4 tasks re-run on 2 survivors", "250 ms", "next commit after 1.25 s"):
        assert part in hover
    lane = next(t for t in fig.data if t.name == "recovery")
    assert list(lane.x) == [r["detected"], r["next_commit"], None] and hover in lane.hovertext


def test_a_recovery_with_no_commit_yet_reaches_to_now(spec: PipelineSpec, clock: Clock) -> None:
    snap = _snap(spec, clock)
    snap["recoveries"][0].update(next_commit=None, to_commit_seconds=None)
    [band] = _shapes(timeline_figure(snap), "recovery")
    assert band.x1 == snap["elapsed"]
    assert "no commit yet" in recovery_hover(snap["recoveries"][0])


def test_checkpoints_are_lines_and_outages_shaded_bands(spec: PipelineSpec, clock: Clock) -> None:
    snap = _snap(spec, clock)
    fig = timeline_figure(snap)
    [ckpt] = _shapes(fig, "checkpoint")
    assert ckpt.type == "line" and ckpt.x0 == snap["checkpoints"][0]["t"]
    [outage] = _shapes(fig, "outage")
    o = snap["outages"][0]
    assert (outage.type, outage.x0, outage.x1) == ("rect", o["start"], o["end"]) and o["end"] - o["start"] == 2.0


def test_an_outage_still_going_is_shaded_up_to_now(spec: PipelineSpec, clock: Clock) -> None:
    timeline = Timeline(spec, clock=clock)
    timeline.on_control_plane("redis", False, "redis unreachable")
    clock.advance(4.0)
    [outage] = _shapes(timeline_figure(timeline.snapshot()), "outage")
    assert (outage.x0, outage.x1) == (0.0, 4.0)


def test_source_lag_gets_a_row_of_its_own(spec: PipelineSpec, clock: Clock) -> None:
    timeline = Timeline(spec, clock=clock)
    timeline.on_source_lag(120)
    fig = timeline_figure(timeline.snapshot())
    assert "source lag" in [t.name for t in fig.data]
    assert [a.text for a in fig.layout.annotations][:4] == ["Step duration (s)", "Rows per step",
                                                           "Source lag (records)", "Events"]


def test_the_graph_figure_labels_each_channel_with_its_worker_and_each_edge_with_its_partitioning(
        spec: PipelineSpec, clock: Clock) -> None:
    fig = graph_figure(_snap(spec, clock)["graph"])
    nodes = {t.name: list(t.text) for t in fig.data if t.name.startswith("worker")}
    assert nodes == {"worker w0": ["<b>events.0</b> on w0", "<b>per-user.0</b> on w0",
                                   "<b>per-user.1</b> on w0 (was w1)"],
                     "worker w2": ["<b>events.1</b> on w2 (was w1)", "<b>events.2</b> on w2",
                                   "<b>per-user.2</b> on w2"]}
    [edges] = [t for t in fig.data if t.name == "hash edge"]
    assert len(edges.x) == 9 * 3  # each of 3 x 3 links: two ends and a break
    labels = {a.name: a.text for a in fig.layout.annotations}
    assert labels["edge-label"] == "hash on user_id"
    stages = [a.text.split("<br>")[0] for a in fig.layout.annotations if a.name == "stage-label"]
    assert stages == ["<b>events + clean</b>", "<b>per-user + output</b>"]


def test_a_rollback_is_labelled_as_one_and_counted_apart_from_recoveries(spec: PipelineSpec, clock: Clock) -> None:
    snap = _snap(spec, clock)
    snap["recoveries"].append({**snap["recoveries"][0], "kind": "rollback", "worker": "", "strategy": "rollback",
                               "boundary": 2, "detected": 9.0, "next_commit": 10.0})
    fig = timeline_figure(snap)
    assert [a.text for a in fig.layout.annotations if a.name == "recovery-label"] == [
        "recovery of w1 (lineage)", "rollback to step 2"]
    figures = {k: v for v, k in headline(snap)}
    assert figures["recovery"] == "1" and figures["rollback"] == "1"
    assert "<td>none (a rollback)</td><td>rollback</td>" in page(snap)


def test_headline_figures(spec: PipelineSpec, clock: Clock) -> None:
    figures = dict((k, v) for v, k in headline(_snap(spec, clock)))
    assert figures == {"steps committed": "5", "rows in committed steps": "14,500", "wall time": "8.6 s",
                       "recovery": "1", "longest loss to next commit": "1.25 s", "checkpoints": "1",
                       "control-plane outages": "1"}


def test_the_page_carries_plotly_and_both_figures_and_needs_no_network(spec: PipelineSpec, clock: Clock) -> None:
    html = page(_snap(spec, clock), {"committed": 5, "seconds": 11.61234, "stats": {"replayed_rows": 9000}})
    assert "<title>clickstream: run report</title>" in html
    assert html.count("Plotly.newPlot") == 2 and 'id="graph"' in html and 'id="timeline"' in html
    assert "recovery of w1 (lineage)" in html and "zookeeper outage" in html
    plotly_js = get_plotlyjs()
    assert html.count(plotly_js) == 1  # plotly.js is in the page once, not fetched
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html.replace(plotly_js, ""))
    assert "location.reload" not in html  # a written report never reloads
    assert "<td>stats.replayed_rows</td><td>9,000</td>" in html and "<td>seconds</td><td>11.612</td>" in html
    assert "<td>w1</td><td>lineage</td>" in html


def test_the_live_page_loads_plotly_from_its_server_and_reloads_until_the_run_ends(spec: PipelineSpec,
                                                                                clock: Clock) -> None:
    timeline = Timeline(spec, clock=clock)
    play(timeline, clock)
    running = page(timeline.snapshot(), live=True)
    assert '<script src="/plotly.min.js"></script>' in running and "location.reload" in running
    assert len(running) < 200_000
    timeline.finish("succeeded")
    assert "location.reload" not in page(timeline.snapshot(), live=True)


def test_text_from_the_run_is_escaped(spec: PipelineSpec, clock: Clock) -> None:
    timeline = Timeline(spec, clock=clock)
    timeline.finish("failed", "<script>alert(1)</script>")
    html = page(timeline.snapshot())
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_write_report_writes_report_html_into_a_directory(tmp_path: Path, spec: PipelineSpec, clock: Clock) -> None:
    timeline = Timeline(clock=clock)  # made without a spec: the one passed draws the graph
    path = write_report(tmp_path, timeline, spec, {"committed": 0})
    assert path == tmp_path / "report.html" and 'id="graph"' in path.read_text()
    assert not list(tmp_path.glob("*.tmp"))
    other = write_report(tmp_path / "sub" / "r.html", timeline)
    assert other.exists() and 'id="graph"' not in other.read_text()


def test_an_empty_timeline_renders(spec: PipelineSpec) -> None:
    snap = Timeline(spec).snapshot()
    assert "Plotly.newPlot" in page(snap)
    json.dumps(snap)
