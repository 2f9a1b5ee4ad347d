"""The run report: one HTML page, made from a timeline snapshot, that opens without a network.

Why: a run directory should hold something a person can open in a browser
after the run, copy to a laptop or attach to a ticket, and see what
happened: headline figures, the dataflow graph with each channel's worker,
the steps over time with every recovery, checkpoint and control-plane
outage marked, and a table of the recoveries. So the page carries all it
needs: plotly.js is written into it once, and the charts are plotly's
(``figures.py``); only the two tables and the headline are plain HTML.

``page(..., live=True)`` is the variant ``serve.py`` serves during a run:
it loads plotly.js from the server it came from and reloads itself every
few seconds until the snapshot says the run has ended.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ftpipeline.dataflow.graph import Graph
from ftpipeline.report.timeline import Timeline
from ftpipeline.report.topology import static_graph
from ftpipeline.spec.model import PipelineSpec

__all__ = ["headline", "page", "write_report", "REFRESH_S", "PLOTLY_JS_PATH"]

REFRESH_S = 3
PLOTLY_JS_PATH = "/plotly.min.js"  # where the live page finds plotly.js (``serve.py``)
_CONFIG = {"displaylogo": False, "responsive": True}

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #1F2933; }
h1 { margin-bottom: 4px; } .sub { color: #52606D; margin-top: 0; }
.figures { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.figure { background: #F5F7FA; border-radius: 6px; padding: 10px 14px; min-width: 120px; }
.figure b { display: block; font-size: 1.4em; } .figure span { color: #52606D; font-size: 0.85em; }
table { border-collapse: collapse; margin: 8px 0 24px; font-size: 0.9em; }
th, td { border-bottom: 1px solid #E4E7EB; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #F5F7FA; } .failed { color: #D62728; } .live { color: #2CA02C; }
"""

_RELOAD = """
<script>
setTimeout(function () {
  fetch("/timeline.json", {cache: "no-store"})
    .then(function (r) { if (r.ok) { location.reload(); } })
    .catch(function () { document.getElementById("state").textContent = "the run's server is gone"; });
}, %(ms)d);
</script>
"""


def headline(snap: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The figures at the top of the page: (value, what it is)."""
    rows = {s["step"]: int(s["rows"]) for s in snap["steps"] if s["committed"] is not None}  # a replay once
    recoveries = [r for r in snap["recoveries"] if r["kind"] == "recovery"]
    rollbacks = [r for r in snap["recoveries"] if r["kind"] == "rollback"]
    figures = [(f"{len(rows):,}", "steps committed"), (f"{sum(rows.values()):,}", "rows in committed steps"),
               (f"{float(snap['elapsed']):.1f} s", "wall time"),
               (str(len(recoveries)), "recoveries" if len(recoveries) != 1 else "recovery")]
    waits = [r["to_commit_seconds"] for r in recoveries if r["to_commit_seconds"] is not None]
    if waits:
        figures.append((f"{max(waits):.2f} s", "longest loss to next commit"))
    if rollbacks:
        figures.append((str(len(rollbacks)), "rollbacks" if len(rollbacks) != 1 else "rollback"))
    checkpoints = [c for c in snap["checkpoints"] if c["kind"] == "checkpoint"]
    figures.append((str(len(checkpoints)), "checkpoints"))
    if snap["outages"]:
        figures.append((str(len(snap["outages"])), "control-plane outages"))
    return figures


def _table(header: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _recovery_table(snap: Mapping[str, Any]) -> str:
    if not snap["recoveries"]:
        return "<p>No worker was lost, and the run never rolled back.</p>"
    rows: list[list[object]] = []
    for r in snap["recoveries"]:
        to_commit = f"{r['to_commit_seconds']:.2f} s" if r["to_commit_seconds"] is not None else "none yet"
        moved = ", ".join(f"{c} to {w}" for c, w in sorted(r["moves"].items())) or "none"
        rows.append([r["worker"] or "none (a rollback)", r["strategy"], f"{r['detected']:.2f} s", r["tasks"],
                     f"{r['seconds'] * 1000:.0f}", to_commit, moved, r["description"]])
    return _table(["worker lost", "strategy", "detected at", "tasks re-run", "ms", "to next commit",
                   "channels moved", "what it did"], rows)


def _value(v: object) -> str:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    return f"{v:,}" if isinstance(v, int) else f"{v:,.3f}"


def _summary_table(summary: Mapping[str, Any] | None) -> str:
    """The run's own figures (``--summary-json``'s), the scalar ones and its ``stats``."""
    if not summary:
        return ""
    rows: list[list[object]] = [[k, _value(v)] for k, v in summary.items() if isinstance(v, str | int | float | bool)]
    stats = summary.get("stats")
    if isinstance(stats, Mapping):
        rows += [[f"stats.{k}", _value(v)] for k, v in stats.items()]
    if not rows:
        return ""
    return "<h2>Summary</h2>" + _table(["figure", "value"], rows)


def _state(snap: Mapping[str, Any], live: bool) -> str:
    ended = snap.get("ended")
    if ended is None:
        return '<span id="state" class="live">running</span>' if live else '<span id="state">did not end</span>'
    cls = "" if ended["outcome"] == "succeeded" else ' class="failed"'
    why = f": {ended['message']}" if ended.get("message") else ""
    return f'<span id="state"{cls}>{html.escape(str(ended["outcome"]) + why)}</span>'


def page(snap: Mapping[str, Any], summary: Mapping[str, Any] | None = None, live: bool = False) -> str:
    """The whole report as one HTML document (``live``: for ``serve.py``, see the module's docstring)."""
    from plotly.offline import get_plotlyjs  # plotly only when a page is made: not on every run's start

    from ftpipeline.report.figures import graph_figure, timeline_figure

    name = str(snap.get("pipeline") or "pipeline")
    plotly_js = (f'<script src="{PLOTLY_JS_PATH}"></script>' if live
                 else f'<script type="text/javascript">{get_plotlyjs()}</script>')
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(name)}: run report</title>",
        '<link rel="icon" href="data:,">',  # no request for a favicon
        f"<style>{_STYLE}</style>", plotly_js, "</head><body>",
        f"<h1>{html.escape(name)}</h1>",
        f'<p class="sub">run report, started {html.escape(str(snap.get("started_at", "")))}: {_state(snap, live)}</p>',
        '<div class="figures">' + "".join(f'<div class="figure"><b>{html.escape(v)}</b><span>{html.escape(k)}</span>'
                                          f"</div>" for v, k in headline(snap)) + "</div>",
    ]
    figures = []
    if snap.get("graph"):
        figures.append(("graph", graph_figure(snap["graph"])))
    figures.append(("timeline", timeline_figure(dict(snap))))
    for div_id, fig in figures:
        parts.append(fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_CONFIG))
    parts += ["<h2>Recoveries</h2>", _recovery_table(snap), _summary_table(summary)]
    if live and snap.get("ended") is None:
        parts.append(_RELOAD % {"ms": REFRESH_S * 1000})
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(path: Path, timeline: Timeline, spec: PipelineSpec | None = None,
                 summary: Mapping[str, Any] | None = None) -> Path:
    """Write ``timeline``'s report to ``path`` (a directory: ``report.html`` in it) and return the file.
    ``spec``: draws the graph when the timeline was made without one; ``summary``: the run's figures."""
    if path.is_dir():
        path = path / "report.html"
    snap = timeline.snapshot()
    if snap["graph"] is None and spec is not None:
        snap["graph"] = static_graph(Graph.physical(spec), {})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(page(snap, summary), encoding="utf-8")
    tmp.replace(path)
    return path
