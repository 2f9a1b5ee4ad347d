"""The report's two plotly figures, built from a timeline snapshot: the dataflow graph and the run over time.

Why: people would rather look at a recovery than read about it. The graph
says where each channel runs (and which ones a recovery moved); the
timeline puts the steps' durations and sizes next to every recovery (a band
from the loss's detection to the next commit), every checkpoint, and every
stretch the control plane was out of reach, on one shared time axis.

Everything is drawn by plotly from the snapshot's plain values
(``timeline.py``), so the same code serves the file written at the end of
a run and the live page (``serve.py``).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = ["graph_figure", "timeline_figure", "recovery_hover", "recovery_label", "PALETTE"]

# one colour per worker, in the order they appear (w0, w1, ...); more workers than colours wrap around
PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#B279A2", "#72B7B2", "#EECA3B", "#9D755D", "#FF9DA6")
RECOVERY = "#D62728"
CHECKPOINT = "#2CA02C"
OUTAGE = "#7F7F7F"
REPLAY = "#FF7F0E"
DASH = {"forward": "solid", "hash": "dash", "broadcast": "dot"}


def _worker_colours(channels: list[dict[str, Any]]) -> dict[str, str]:
    workers = sorted({str(c["worker"]) for c in channels} | {str(c["initial_worker"]) for c in channels},
                     key=lambda w: (len(w), w))
    return {w: PALETTE[i % len(PALETTE)] for i, w in enumerate(workers)}


def graph_figure(graph: dict[str, Any]) -> go.Figure:
    """Stages as columns, one node per channel coloured and labelled by its worker; links by partitioning."""
    fig = go.Figure()
    stages = {s["name"]: s for s in graph["stages"]}
    pos: dict[str, tuple[float, float]] = {}
    for c in graph["channels"]:
        parallelism = stages[c["stage"]]["parallelism"]
        pos[c["key"]] = (float(c["column"]), (parallelism - 1) / 2 - c["index"])
    top = max((y for _, y in pos.values()), default=0.0)
    for partition in ("forward", "hash", "broadcast"):
        xs: list[float | None] = []
        ys: list[float | None] = []
        for link in graph["links"]:
            if link["partition"] == partition:
                (x0, y0), (x1, y1) = pos[link["from"]], pos[link["to"]]
                xs += [x0, x1, None]
                ys += [y0, y1, None]
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"{partition} edge", hoverinfo="skip",
                                     line={"color": "#9AA5B1", "width": 1.5, "dash": DASH[partition]}))
    for edge in graph["edges"]:
        x = (stages[edge["upstream"]]["column"] + stages[edge["downstream"]]["column"]) / 2
        keys = f" on {', '.join(edge['keys'])}" if edge["keys"] else ""
        fig.add_annotation(x=x, y=top + 0.45, text=f"{edge['partition']}{keys}", showarrow=False,
                           font={"size": 12, "color": "#52606D"}, name="edge-label")
    for s in graph["stages"]:
        members = " + ".join(s["members"])
        fig.add_annotation(x=s["column"], y=top + 0.9, showarrow=False, font={"size": 13},
                           text=f"<b>{members}</b><br>{s['kind']}{', stateful' if s['stateful'] else ''}",
                           name="stage-label")
    colours = _worker_colours(graph["channels"])
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for c in graph["channels"]:
        by_worker.setdefault(str(c["worker"]), []).append(c)
    for worker in sorted(by_worker, key=lambda w: (len(w), w)):
        chans = by_worker[worker]
        moved = [c["initial_worker"] != c["worker"] for c in chans]
        fig.add_trace(go.Scatter(
            x=[pos[c["key"]][0] for c in chans], y=[pos[c["key"]][1] for c in chans], mode="markers+text",
            name=f"worker {worker}", textposition="bottom center",
            text=[f"<b>{c['key']}</b> on {worker}" + (f" (was {c['initial_worker']})" if m else "")
                  for c, m in zip(chans, moved)],
            hovertext=[f"channel {c['key']}<br>runs on {worker}"
                       + (f"<br>moved from {c['initial_worker']} by a recovery" if m else "")
                       for c, m in zip(chans, moved)],
            hoverinfo="text",
            marker={"size": 30, "color": colours.get(worker, OUTAGE),
                    "line": {"width": [4 if m else 1 for m in moved],
                             "color": [RECOVERY if m else "#323F4B" for m in moved]}},
        ))
    columns = len(graph["stages"])
    fig.update_layout(
        title={"text": "Dataflow: the physical graph, each channel on its worker"},
        showlegend=True, height=260 + 80 * max((s["parallelism"] for s in graph["stages"]), default=1),
        xaxis={"visible": False, "range": [-0.6, columns - 0.4]},
        yaxis={"visible": False, "range": [-top - 0.7, top + 1.3]},
        margin={"l": 20, "r": 20, "t": 60, "b": 20}, template="plotly_white",
    )
    return fig


def recovery_label(r: dict[str, Any]) -> str:
    """What the band of a recovery (or a rollback, which loses no worker) is labelled with."""
    if r["kind"] == "rollback":
        return f"rollback to step {r['boundary'] or 0}"
    return f"recovery of {r['worker']} ({r['strategy']})"


def recovery_hover(r: dict[str, Any]) -> str:
    """One recovery as the timeline's hover text says it: worker, strategy, tasks re-run, ms, time to commit."""
    to_commit = f"{r['to_commit_seconds']:.2f} s" if r.get("to_commit_seconds") is not None else "no commit yet"
    return (f"<b>{recovery_label(r)}</b><br>detected at {r['detected']:.2f} s<br>"
            f"{r['tasks']} tasks re-run on {r['survivors']} survivor{'' if r['survivors'] == 1 else 's'}<br>"
            f"planned in {r['seconds'] * 1000:.0f} ms<br>next commit after {to_commit}")


def _bar_width(times: list[float]) -> float | None:
    """Bars most of the usual gap between commits wide (plotly's own width follows the closest two)."""
    gaps = sorted(b - a for a, b in zip(times, times[1:]) if b > a)
    return 0.7 * gaps[len(gaps) // 2] if gaps else None


def _segments(spans: list[tuple[float, float, str]], lane: str) -> tuple[list[Any], list[Any], list[Any]]:
    xs: list[Any] = []
    ys: list[Any] = []
    texts: list[Any] = []
    for start, end, text in spans:
        xs += [start, end, None]
        ys += [lane, lane, None]
        texts += [text, text, None]
    return xs, ys, texts


def timeline_figure(snap: dict[str, Any]) -> go.Figure:
    """Step duration, rows per step (and source lag, if any) over time, then a lane of events; recoveries,
    checkpoints and control-plane outages marked across the whole height."""
    now = float(snap["elapsed"])
    lag = snap.get("lag") or []
    titles = ["Step duration (s)", "Rows per step"] + (["Source lag (records)"] if lag else []) + ["Events"]
    rows = len(titles)
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.06, subplot_titles=titles,
                        row_heights=[0.33, 0.27] + ([0.18] if lag else []) + [0.22])
    done = [s for s in snap["steps"] if s["committed"] is not None]
    hover = [f"step {s['step']} ({s['reason'] or 'before this run'})<br>committed at {s['committed']:.2f} s<br>"
             f"took {s['seconds']:.3f} s<br>{s['rows']:,} rows" for s in done]
    fig.add_trace(go.Scatter(
        x=[s["committed"] for s in done], y=[s["seconds"] for s in done], mode="lines+markers", name="step duration",
        hovertext=hover, hoverinfo="text", line={"color": PALETTE[0]},
        marker={"color": [REPLAY if s["reason"] == "replay" else PALETTE[0] for s in done], "size": 6}), row=1, col=1)
    fig.add_trace(go.Bar(x=[s["committed"] for s in done], y=[s["rows"] for s in done], name="rows per step",
                         hovertext=hover, hoverinfo="text", width=_bar_width([s["committed"] for s in done]),
                         marker={"color": [REPLAY if s["reason"] == "replay" else PALETTE[2] for s in done]}),
                  row=2, col=1)
    if lag:
        fig.add_trace(go.Scatter(x=[p["t"] for p in lag], y=[p["records"] for p in lag], mode="lines",
                                 name="source lag", line={"color": PALETTE[3]}), row=3, col=1)
    for title in fig.layout.annotations:  # left: the middle of the top is where recoveries are labelled
        title.update(x=0, xanchor="left", font={"size": 13})
    _events_lane(fig, snap, now, rows)
    _marks(fig, snap, now)
    fig.update_xaxes(title_text="seconds since the run started", row=rows, col=1)
    fig.update_layout(title={"text": "The run over time"}, height=300 + 170 * rows, template="plotly_white",
                      hovermode="closest", bargap=0.2, margin={"l": 60, "r": 20, "t": 90, "b": 50},
                      legend={"orientation": "h", "y": -0.08})
    return fig


def _events_lane(fig: go.Figure, snap: dict[str, Any], now: float, row: int) -> None:
    """Workers, recoveries, checkpoints and outages as marks and bars on named lanes."""
    recoveries = snap["recoveries"]
    spans = [(r["detected"], r["next_commit"] if r["next_commit"] is not None else max(now, r["detected"]),
              recovery_hover(r)) for r in recoveries]
    if spans:
        xs, ys, texts = _segments(spans, "recovery")
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name="recovery", hovertext=texts,
                                 hoverinfo="text", line={"color": RECOVERY, "width": 10},
                                 marker={"color": RECOVERY, "size": 10}), row=row, col=1)
    ckpts = [c for c in snap["checkpoints"] if c["kind"] == "checkpoint"]
    if ckpts:
        fig.add_trace(go.Scatter(
            x=[c["t"] for c in ckpts], y=["checkpoint"] * len(ckpts), mode="markers", name="checkpoint",
            hovertext=[f"checkpoint {c.get('epoch')} committed at step {c.get('boundary')}<br>"
                       f"took {float(c.get('seconds') or 0):.2f} s, {int(c.get('bytes') or 0):,} bytes" for c in ckpts],
            hoverinfo="text", marker={"symbol": "diamond", "size": 12, "color": CHECKPOINT}), row=row, col=1)
    aborted = [c for c in snap["checkpoints"] if c["kind"] == "checkpoint-aborted"]
    if aborted:
        fig.add_trace(go.Scatter(
            x=[c["t"] for c in aborted], y=["checkpoint"] * len(aborted), mode="markers", name="checkpoint aborted",
            hovertext=[f"checkpoint {c['epoch']} aborted: {c['reason']}" for c in aborted], hoverinfo="text",
            marker={"symbol": "diamond-open", "size": 12, "color": CHECKPOINT}), row=row, col=1)
    for component in sorted({o["component"] for o in snap["outages"]}):
        outs = [o for o in snap["outages"] if o["component"] == component]
        xs, ys, texts = _segments([(o["start"], o["end"] if o["end"] is not None else now,
                                    f"<b>{component} out of reach</b><br>{o['down']}<br>{o['up'] or 'still out'}")
                                   for o in outs], f"{component} outage")
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=f"{component} outage", hovertext=texts,
                                 hoverinfo="text", line={"color": OUTAGE, "width": 10},
                                 marker={"color": OUTAGE, "size": 8}), row=row, col=1)
    starts = _start_ups(snap["workers"], now)
    if starts:
        xs, ys, texts = _segments(starts, "workers")
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="starting workers", hovertext=texts,
                                 hoverinfo="text", line={"color": "#BCCCDC", "width": 6}), row=row, col=1)
    workers = snap["workers"]
    if workers:
        symbols = {"workers-starting": "circle-open", "workers-kept": "circle-open", "worker-joined": "circle",
                   "worker-lost": "x", "worker-fenced": "hexagon-open"}
        texts = []
        for w in workers:
            who = ", ".join(w["workers"]) if "workers" in w else w["worker"]
            why = w.get("how") or w.get("what") or ""
            texts.append(f"{w['kind'].replace('-', ' ')}: {who} at {w['t']:.2f} s" + (f"<br>{why}" if why else ""))
        fig.add_trace(go.Scatter(
            x=[w["t"] for w in workers], y=["workers"] * len(workers), mode="markers", name="workers",
            hovertext=texts, hoverinfo="text",
            marker={"symbol": [symbols[w["kind"]] for w in workers], "size": 11,
                    "color": [RECOVERY if w["kind"] in ("worker-lost", "worker-fenced") else PALETTE[0]
                              for w in workers]}),
            row=row, col=1)


def _start_ups(workers: list[dict[str, Any]], now: float) -> list[tuple[float, float, str]]:
    """From a set of workers starting to the last of them joined (or now, if some still start)."""
    spans = []
    start: float | None = None
    for w in workers:
        if w["kind"] == "workers-starting":
            start = w["t"]
        elif w["kind"] == "worker-joined" and start is not None and w["ready"] >= w["total"]:
            spans.append((start, w["t"], f"{w['total']} workers started in {w['t'] - start:.1f} s"))
            start = None
    if start is not None:
        spans.append((start, now, "workers starting"))
    return spans


def _marks(fig: go.Figure, snap: dict[str, Any], now: float) -> None:
    """Bands and lines over every row: a recovery from detection to the next commit, an outage while it
    lasted, a checkpoint when it committed. Set in one layout update: plotly checks every shape already
    there at each ``add_shape``, which made a long run's page take seconds (bench/report_charts.py)."""
    shapes: list[dict[str, Any]] = []
    labels: list[dict[str, Any]] = []
    over = {"xref": "x", "yref": "paper", "y0": 0, "y1": 1}
    top = {"y": 1.0, "xref": "x", "yref": "paper", "yanchor": "bottom", "xanchor": "left", "showarrow": False}
    for o in snap["outages"]:
        end = o["end"] if o["end"] is not None else now
        shapes.append({"type": "rect", **over, "x0": o["start"], "x1": max(end, o["start"] + 0.05),
                       "fillcolor": OUTAGE, "opacity": 0.18, "line": {"width": 0}, "layer": "below",
                       "name": f"outage {o['component']}"})
        labels.append({**top, "x": o["start"], "text": f"{o['component']} outage",
                       "font": {"color": OUTAGE, "size": 11}, "name": "outage-label"})
    for c in snap["checkpoints"]:
        if c["kind"] == "checkpoint":
            shapes.append({"type": "line", **over, "x0": c["t"], "x1": c["t"],
                           "line": {"color": CHECKPOINT, "width": 1, "dash": "dot"}, "name": f"checkpoint {c.get('epoch')}"})
    for r in snap["recoveries"]:
        end = r["next_commit"] if r["next_commit"] is not None else max(now, r["detected"])
        shapes.append({"type": "rect", **over, "x0": r["detected"], "x1": max(end, r["detected"] + 0.05),
                       "fillcolor": RECOVERY, "opacity": 0.15, "line": {"width": 0}, "layer": "below",
                       "name": f"recovery {r['worker']}"})
        labels.append({**top, "x": r["detected"], "text": recovery_label(r), "hovertext": recovery_hover(r),
                       "font": {"color": RECOVERY, "size": 12}, "name": "recovery-label"})
    fig.update_layout(shapes=[*fig.layout.shapes, *shapes], annotations=[*fig.layout.annotations, *labels])
