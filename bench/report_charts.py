"""Which library draws the run report's charts: plotly or vega-lite (through altair), side by side, one run.

Why: ``report.html`` (``runtime/ftpipeline/report/``) must open in a browser
with no network, so whichever library draws its charts also ships its
JavaScript inside the page, and the page is written once at the end of every
``ftpipeline run``. The two candidates were plotly (``plotly.js`` written
into the page) and vega-lite through altair (``vega``, ``vega-lite`` and
``vega-embed`` inlined, which altair takes from the ``vl-convert-python``
package). This script is the measurement the choice rests on.

Both draw the same content from the same synthetic run (seeded: ``N`` steps
of about 30k rows, a few worker losses, each with its recovery, and a
checkpoint every few steps), as a snapshot shaped like
``Timeline.snapshot()``:

- plotly: ``report.figures.timeline_figure``, the code the report runs —
  step duration, rows per step and an events lane as three stacked subplots
  sharing x, recovery bands and checkpoint lines across all three — written
  with ``write_html(include_plotlyjs=True)``;
- altair: the same three charts ``vconcat``'ed on a shared x scale (zoomed
  together), the recovery bands a ``mark_rect`` layer and the checkpoints a
  ``mark_rule`` layer in each, written with
  ``chart.save(..., format="html", inline=True)``.

Printed, per step count: the median seconds to build the chart and write
the file (the two in turn, the order rotated from round to round, in
this one process), the file's bytes, whether the page is self-contained
(no script or stylesheet fetched over the network), and the ratios of
altair to plotly. Then, per round too, the cold cost a run really
pays, since it writes one report: a fresh interpreter importing the
library and writing its first page. Last, the distributions each library
installs beyond the rest of the project's dependencies, with their sizes
on disk. On a busy machine the absolute times drift; the ratios, from
alternated rounds, are what to read.

    pip install -e '.[bench]'                  # altair and vl-convert-python
    python bench/report_charts.py              # 200 and 2000 steps, 5 rounds
    python bench/report_charts.py --steps 500 --rounds 9 --keep charts   # keep the pages to look at
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if TYPE_CHECKING:
    import altair as alt

CANDIDATES = ("plotly", "altair")
# the distributions a project would add to its dependencies for each library
ROOTS = {"plotly": ["plotly"], "altair": ["altair", "vl-convert-python"]}
RECOVERY = "#D62728"  # the colours figures.py uses
CHECKPOINT = "#2CA02C"
STEP_COLOUR = "#4C78A8"
ROWS_COLOUR = "#54A24B"
# a page that fetches code or style from elsewhere: <script src="https://..."> or <link href="//...">
REMOTE = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?:https?:)?//", re.IGNORECASE)


# --- the run to draw ---------------------------------------------------------------------------------------

def synthetic_run(steps: int, recoveries: int, checkpoint_every: int, seed: int) -> dict[str, Any]:
    """A run's timeline snapshot (the keys ``figures.timeline_figure`` reads), the same for the same arguments."""
    rng = random.Random(seed)
    lost_at = set(rng.sample(range(max(2, steps // 10), steps + 1), min(recoveries, steps - steps // 10)))
    t = 1.5  # the workers' start-up
    out_steps: list[dict[str, Any]] = []
    out_recoveries: list[dict[str, Any]] = []
    checkpoints: list[dict[str, Any]] = []
    workers: list[dict[str, Any]] = []
    for step in range(1, steps + 1):
        started = t
        seconds = rng.lognormvariate(math.log(0.25), 0.3)
        rows = max(1000, int(rng.gauss(30_000, 3_000)))
        if step in lost_at:
            worker = f"w{rng.randrange(3)}"
            detected = started + seconds * rng.uniform(0.2, 0.8)
            planned = rng.uniform(0.02, 0.2)
            seconds += planned + rng.uniform(0.5, 2.5)  # the lost channels' tasks re-run on the survivors
            next_commit = started + seconds
            workers.append({"t": round(detected, 4), "kind": "worker-lost", "worker": worker,
                            "how": "missed heartbeats"})
            out_recoveries.append({
                "t": round(detected + planned, 4), "kind": "recovery", "worker": worker, "strategy": "lineage",
                "epoch": len(out_recoveries) + 1, "detected": round(detected, 4), "seconds": round(planned, 4),
                "tasks": rng.randint(4, 24), "survivors": 2, "lost_rows": rng.randint(10_000, 200_000),
                "boundary": step - 1 - (step - 1) % checkpoint_every if checkpoint_every else None,
                "to_commit_seconds": round(next_commit - detected, 4), "next_commit": round(next_commit, 4)})
        committed = started + seconds
        out_steps.append({"step": step, "reason": "records", "rows": rows, "started": round(started, 4),
                          "committed": round(committed, 4), "seconds": round(seconds, 4)})
        if checkpoint_every and step % checkpoint_every == 0:
            took = rng.uniform(0.05, 0.3)  # written while the next steps run
            checkpoints.append({"t": round(committed + took, 4), "kind": "checkpoint",
                                "epoch": step // checkpoint_every, "boundary": step, "seconds": round(took, 4),
                                "bytes": rng.randint(2_000_000, 40_000_000)})
        t = committed + rng.uniform(0.001, 0.01)
    return {"elapsed": round(t + 0.5, 4), "steps": out_steps, "recoveries": out_recoveries,
            "checkpoints": checkpoints, "outages": [], "workers": workers, "lag": []}


# --- the two candidates ------------------------------------------------------------------------------------

def write_plotly(snap: dict[str, Any], path: Path) -> None:
    """The report's own timeline figure, with plotly.js written into the page."""
    from ftpipeline.report.figures import timeline_figure

    fig = timeline_figure(snap)
    fig.write_html(path, include_plotlyjs=True, full_html=True, config={"displaylogo": False, "responsive": True})


def altair_chart(snap: dict[str, Any]) -> alt.VConcatChart:
    """The same three panels as ``timeline_figure``: vega-lite concatenated, one zoomable x scale."""
    import altair as alt

    now = float(snap["elapsed"])
    done = [s for s in snap["steps"] if s["committed"] is not None]
    gaps = sorted(b["committed"] - a["committed"] for a, b in zip(done, done[1:]) if b["committed"] > a["committed"])
    half = 0.35 * gaps[len(gaps) // 2] if gaps else 0.05  # bars 0.7 of the usual gap wide, as figures.py does
    steps = alt.InlineData(values=[{**s, "x0": s["committed"] - half, "x1": s["committed"] + half} for s in done])
    recoveries = alt.InlineData(values=[
        {"detected": r["detected"], "end": max(r["next_commit"] if r["next_commit"] is not None else now,
                                               r["detected"] + 0.05),
         "lane": "recovery", "label": f"recovery of {r['worker']} ({r['strategy']})", "tasks": r["tasks"],
         "survivors": r["survivors"], "planned_ms": round(r["seconds"] * 1000),
         "to_commit_seconds": r["to_commit_seconds"]} for r in snap["recoveries"]])
    ckpts = [c for c in snap["checkpoints"] if c["kind"] == "checkpoint"]
    checkpoints = alt.InlineData(values=[{"t": c["t"], "lane": "checkpoint", "epoch": c["epoch"], "step": c["boundary"],
                                    "seconds": c["seconds"], "bytes": c["bytes"]} for c in ckpts])
    lost = alt.InlineData(values=[{"t": w["t"], "lane": "workers", "worker": w["worker"], "how": w.get("how", "")}
                            for w in snap["workers"] if w["kind"] == "worker-lost"])
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    x_scale = alt.Scale(domain=[0, now])
    step_tip = [alt.Tooltip("step:Q"), alt.Tooltip("reason:N"), alt.Tooltip("committed:Q", format=".2f"),
                alt.Tooltip("seconds:Q", format=".3f"), alt.Tooltip("rows:Q", format=",")]
    recovery_tip = [alt.Tooltip("label:N"), alt.Tooltip("detected:Q", format=".2f"), alt.Tooltip("tasks:Q"),
                    alt.Tooltip("survivors:Q"), alt.Tooltip("planned_ms:Q"),
                    alt.Tooltip("to_commit_seconds:Q", format=".2f")]

    def marks() -> list[alt.Chart]:
        """Across every panel: a band per recovery, from its detection to the next commit; a line per checkpoint."""
        return [alt.Chart(recoveries).mark_rect(color=RECOVERY, opacity=0.15).encode(
                    x=alt.X("detected:Q", scale=x_scale), x2="end:Q", tooltip=recovery_tip),
                alt.Chart(checkpoints).mark_rule(color=CHECKPOINT, strokeWidth=1, strokeDash=[2, 2]).encode(
                    x=alt.X("t:Q", scale=x_scale))]

    duration = alt.Chart(steps).mark_line(color=STEP_COLOUR, point=alt.OverlayMarkDef(color=STEP_COLOUR, size=20)).encode(
        x=alt.X("committed:Q", scale=x_scale, title=None), y=alt.Y("seconds:Q", title="Step duration (s)"),
        tooltip=step_tip).add_params(zoom)
    labels = alt.Chart(recoveries).mark_text(align="left", baseline="top", dx=3, dy=3, color=RECOVERY, fontSize=12).encode(
        x=alt.X("detected:Q", scale=x_scale), y=alt.value(0), text="label:N", tooltip=recovery_tip)
    rows = alt.Chart(steps).mark_bar(color=ROWS_COLOUR).encode(
        x=alt.X("x0:Q", scale=x_scale, title=None), x2="x1:Q", y=alt.Y("rows:Q", title="Rows per step"), y2=alt.datum(0),
        tooltip=step_tip).add_params(zoom)
    lanes = alt.Scale(domain=["recovery", "checkpoint", "workers"])
    recovery_lane = alt.Chart(recoveries).mark_rule(color=RECOVERY, strokeWidth=10).encode(
        x=alt.X("detected:Q", scale=x_scale, title="seconds since the run started"), x2="end:Q",
        y=alt.Y("lane:N", scale=lanes, title="Events"), tooltip=recovery_tip).add_params(zoom)
    checkpoint_lane = alt.Chart(checkpoints).mark_point(shape="diamond", filled=True, size=120,
                                                        color=CHECKPOINT, opacity=1).encode(
        x=alt.X("t:Q", scale=x_scale), y=alt.Y("lane:N", scale=lanes),
        tooltip=["epoch:Q", "step:Q", alt.Tooltip("seconds:Q", format=".2f"), alt.Tooltip("bytes:Q", format=",")])
    lost_lane = alt.Chart(lost).mark_point(shape="cross", filled=True, size=120, color=RECOVERY, opacity=1).encode(
        x=alt.X("t:Q", scale=x_scale), y=alt.Y("lane:N", scale=lanes),
        tooltip=["worker:N", "how:N", alt.Tooltip("t:Q", format=".2f")])
    return alt.VConcatChart(vconcat=[
        alt.layer(*marks(), duration, labels).properties(width=900, height=250),
        alt.layer(*marks(), rows).properties(width=900, height=200),
        alt.layer(*marks(), recovery_lane, checkpoint_lane, lost_lane).properties(width=900, height=150)
    ], title="The run over time", resolve=alt.Resolve(scale=alt.ScaleResolveMap(x="shared")))


def write_altair(snap: dict[str, Any], path: Path) -> None:
    """The vega-lite chart, with vega, vega-lite and vega-embed inlined into the page (from vl-convert)."""
    with warnings.catch_warnings():  # the one zoom is added to the three panels on purpose: altair merges it
        warnings.filterwarnings("ignore", "Automatically deduplicated selection parameter", UserWarning)
        altair_chart(snap).save(str(path), format="html", inline=True)


WRITERS: dict[str, Callable[[dict[str, Any], Path], None]] = {
    "plotly": write_plotly, "altair": write_altair}


def self_contained(path: Path) -> bool:
    return REMOTE.search(path.read_text(encoding="utf-8")) is None


# --- a fresh interpreter: what a run pays to write its one report ------------------------------------------

def child(candidate: str, snap: dict[str, Any], path: Path) -> None:
    """Import the library, then write one page; print both times as JSON. Only the library's own modules
    are timed as the import (``ftpipeline.report.figures`` is imported after, untimed: a run has it already)."""
    began = time.perf_counter()
    plotly = candidate.startswith("plotly")
    for module in ["plotly.graph_objects", "plotly.subplots"] if plotly else ["altair"]:
        importlib.import_module(module)
    imported = time.perf_counter()
    if plotly:
        importlib.import_module("ftpipeline.report.figures")
    ready = time.perf_counter()
    WRITERS[candidate](snap, path)
    print(json.dumps({"import": imported - began, "first": time.perf_counter() - ready}))


def cold(candidate: str, args: argparse.Namespace, steps: int, path: Path) -> dict[str, float]:
    done = subprocess.run([sys.executable, __file__, "--child", candidate, "--steps", str(steps),
                           "--recoveries", str(args.recoveries), "--checkpoint-every", str(args.checkpoint_every),
                           "--seed", str(args.seed), "--out", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{candidate} in a fresh interpreter failed:\n{done.stderr[-3000:]}")
    return {k: float(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


# --- what each library installs ----------------------------------------------------------------------------

def marker_env(extra: str) -> dict[str, str]:
    return {**{k: str(v) for k, v in default_environment().items()}, "extra": extra}


def closure(roots: Iterable[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions ``roots`` need, themselves included, following requirements (and the
    extras asked for) whose markers hold here."""
    found: dict[str, metadata.Distribution] = {}
    todo: list[tuple[str, frozenset[str]]] = [(r, frozenset()) for r in roots]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        key = (str(canonicalize_name(name)), extras)
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement this environment does not satisfy: counted as nothing
        found[key[0]] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not any(req.marker.evaluate(marker_env(e))
                                                  for e in (extras or frozenset({""}))):
                continue
            todo.append((req.name, frozenset(req.extras)))
    return found


def installed_bytes(dist: metadata.Distribution) -> int:
    total = 0
    for f in dist.files or []:
        located = Path(str(f.locate()))
        if located.is_file():
            total += located.stat().st_size
    return total


def project_requirements() -> list[str]:
    """The names of ftpipeline's own dependencies (no extras), from its installed metadata."""
    names = []
    for line in metadata.distribution("ftpipeline").requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(marker_env("")):
            names.append(req.name)
    return names


def footprints() -> dict[str, list[tuple[str, str, int]]]:
    """Per library: (name, version, bytes) of each distribution it brings beyond the project's other
    dependencies (those without either library)."""
    candidates = {str(canonicalize_name(r)) for roots in ROOTS.values() for r in roots}
    base = closure(n for n in project_requirements() if str(canonicalize_name(n)) not in candidates)
    out: dict[str, list[tuple[str, str, int]]] = {}
    for library, roots in ROOTS.items():
        mine = closure(roots)
        out[library] = sorted(((d.metadata["Name"], d.version, installed_bytes(d))
                               for n, d in mine.items() if n not in base), key=lambda x: -x[2])
    return out


# --- the run -----------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="200,2000", help="steps of the synthetic run, comma separated")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds, each running every candidate once, the order rotated from round to round")
    parser.add_argument("--recoveries", type=int, default=3, help="worker losses in the synthetic run")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints (0: none)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-cold", action="store_true", help="skip the fresh-interpreter measurement")
    parser.add_argument("--keep", type=Path, help="write the pages here, one per candidate and step count")
    parser.add_argument("--child", choices=CANDIDATES, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.steps.split(",")]
    if args.child:
        child(args.child, synthetic_run(sizes[0], args.recoveries, args.checkpoint_every, args.seed), args.out)
        return
    if importlib.util.find_spec("altair") is None or importlib.util.find_spec("vl_convert") is None:
        raise SystemExit("altair and vl-convert-python are needed: pip install -e '.[bench]'")
    warm: dict[tuple[str, int], list[float]] = {}
    fresh: dict[tuple[str, int], list[dict[str, float]]] = {}
    size_of: dict[tuple[str, int], int] = {}
    whole: dict[tuple[str, int], bool] = {}
    with tempfile.TemporaryDirectory(prefix="report-charts-") as tmp:
        out = args.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        for steps in sizes:
            snap = synthetic_run(steps, args.recoveries, args.checkpoint_every, args.seed)
            print(f"{steps:,d} steps, {len(snap['recoveries'])} recoveries, {len(snap['checkpoints'])} checkpoints",
                  flush=True)
            for name in CANDIDATES:  # the first page in this process loads what the library loads lazily
                WRITERS[name](snap, out / f"{name}-{steps}.html")
            for i in range(args.rounds):
                order = CANDIDATES[i % len(CANDIDATES):] + CANDIDATES[:i % len(CANDIDATES)]
                cells = []
                for name in order:
                    path = out / f"{name}-{steps}.html"
                    began = time.perf_counter()
                    WRITERS[name](snap, path)
                    took = time.perf_counter() - began
                    warm.setdefault((name, steps), []).append(took)
                    size_of[(name, steps)] = path.stat().st_size
                    whole[(name, steps)] = self_contained(path)
                    cell = f"{name:15} {took:6.3f} s"
                    if not args.no_cold:
                        c = cold(name, args, steps, Path(tmp) / f"cold-{name}-{steps}.html")
                        fresh.setdefault((name, steps), []).append(c)
                        cell += f" (fresh: import {c['import']:5.2f} s + first page {c['first']:5.2f} s)"
                    cells.append(cell)
                print(f"  round {i + 1}:\n    " + "\n    ".join(cells), flush=True)
        if args.keep:
            print(f"pages kept in {args.keep}")
    med = statistics.median
    print()
    print(f"median over {args.rounds} rotated rounds; 'fresh' = a new interpreter importing the library, "
          "then writing its first page")
    head = f"{'steps':>7} {'candidate':15}{'write (s)':>11}{'bytes':>13}{'self-contained':>16}"
    if not args.no_cold:
        head += f"{'fresh import (s)':>18}{'fresh page (s)':>16}"
    print(head)
    for steps in sizes:
        for name in CANDIDATES:
            k = (name, steps)
            line = f"{steps:>7,d} {name:15}{med(warm[k]):>11.3f}{size_of[k]:>13,d}{'yes' if whole[k] else 'NO':>16}"
            if not args.no_cold:
                line += f"{med(c['import'] for c in fresh[k]):>18.2f}{med(c['first'] for c in fresh[k]):>16.2f}"
            print(line)
    print()
    print("ratios altair/plotly")
    for steps in sizes:
        a = ("altair", steps)
        for base in ("plotly",):
            p = (base, steps)
            line = (f"{steps:>7,d} steps, altair/{base + ':':15} write time {med(warm[a]) / med(warm[p]):5.2f}, "
                    f"bytes {size_of[a] / size_of[p]:5.2f}")
            if not args.no_cold:
                fa = med(c["import"] + c["first"] for c in fresh[a])
                fp = med(c["import"] + c["first"] for c in fresh[p])
                line += f", fresh import + first page {fa / fp:5.2f}"
            print(line)
    print()
    print("installed beyond the project's other dependencies (those without plotly, altair, vl-convert-python)")
    totals = {}
    for library, dists in footprints().items():
        totals[library] = sum(b for _, _, b in dists)
        listed = ", ".join(f"{n} {v} ({b / 1e6:.1f} MB)" for n, v, b in dists)
        print(f"  {library:8}{len(dists):>3} distributions, {totals[library] / 1e6:7.1f} MB: {listed}")
    print(f"  ratio altair/plotly installed size: {totals['altair'] / totals['plotly']:.2f}")


if __name__ == "__main__":
    main()
