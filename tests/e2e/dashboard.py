"""The chart's Grafana dashboard, evaluated against a real Prometheus as Grafana would.

Grafana itself is not run here (it is AGPL-licensed, which this project does
not take in, even for tests): what a dashboard shows is its panels'
queries, so each one is sent to Prometheus's range-query API the way a
Grafana time series panel sends it, with the dashboard's variables
substituted as Grafana substitutes them (``$pipeline`` from its
``label_values`` query). A panel whose query returns no sample would be an
empty panel on the real dashboard.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts" / "ftpipeline" / "dashboards" / "ftpipeline.json"


class RangeQueries(Protocol):
    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict[str, Any]]: ...
    def label_values(self, label: str, match: str) -> list[str]: ...


@dataclass(frozen=True)
class Panel:
    title: str
    expr: str
    series: int = 0     # series with at least one finite sample
    samples: int = 0


def panel_queries(dashboard: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """(title, expr) of every target of every panel, rows' collapsed panels included."""
    doc = dashboard or json.loads(DASHBOARD.read_text())
    out = []
    for panel in doc["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            out += [(inner.get("title", ""), t["expr"]) for t in inner.get("targets", []) if t.get("expr")]
    return out


def variable_query(dashboard: dict[str, Any] | None = None) -> tuple[str, str]:
    """The ``pipeline`` variable's ``label_values(metric, label)``: (metric, label)."""
    doc = dashboard or json.loads(DASHBOARD.read_text())
    [query] = [v["query"] for v in doc["templating"]["list"] if v.get("name") == "pipeline"]
    text = query["query"] if isinstance(query, dict) else query
    m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", text.strip())
    assert m, f"not a label_values query: {text}"
    return m.group(1), m.group(2)


def substitute(expr: str, pipeline: str) -> str:
    """``$pipeline`` and ``${pipeline}`` as Grafana puts one selected value into a regex matcher."""
    escaped = re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\\\1", pipeline)
    return expr.replace("${pipeline}", escaped).replace("$pipeline", escaped)


def evaluate(prometheus: RangeQueries, pipeline: str, start: float, end: float, step: float = 5.0) -> list[Panel]:
    """Every panel's queries over [start, end], for ``pipeline`` as the variable's selected value.

    The points are laid back from ``end``, as on a dashboard opened at ``end``: laid on from ``start``, the
    last one can fall up to a step before ``end``, and a run whose steps all committed in its last seconds
    (a 12-step run here can) then shows no rate at any point, though the dashboard shows it a moment later."""
    start = end - math.ceil((end - start) / step) * step
    metric, label = variable_query()
    offered = prometheus.label_values(label, metric)
    assert pipeline in offered, f"the pipeline variable offers {offered}, not {pipeline}"
    panels = []
    for title, expr in panel_queries():
        result = prometheus.query_range(substitute(expr, pipeline), start, end, step)
        finite = [s for s in result if any(math.isfinite(float(v)) for _, v in s["values"])]
        samples = sum(1 for s in finite for _, v in s["values"] if math.isfinite(float(v)))
        panels.append(Panel(title, expr, len(finite), samples))
    return panels
