"""A step's clock: what a step runs with besides its rows, recorded with it so every re-run and replay of it
runs with the same.

Output is a function of a step's input only if everything else it reads is fixed with the step: its
watermark (which windows close, which rows are late: ``eventtime/``), its processing time (a keyed function's
``ctx.now`` and processing-time timers: ``operators/process.py``) and the version of each table a lookup stage
joins (``dataflow/lookup.py``). The coordinator takes them when it triggers the step and writes them where the
step's offsets go (Redis's step log, the command log, a checkpoint's manifest, the step history); a worker
is handed them with each task, whatever its kind: a first run, a re-run, a rebuild of many steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepClock:
    """Watermark (event time, us; None before there is one), processing time (us since the epoch, when the
    step was triggered), each lookup stage's table version, and the watermark of the step before (``before``:
    what rows emitted by this step's advance are judged against downstream, ``eventtime/order.py``): the
    module's docstring says why."""

    watermark: int | None = None
    now: int | None = None
    tables: Mapping[str, int | str] = field(default_factory=dict)
    before: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Only what the step has (a pipeline with no event time records no watermark)."""
        return {**({"watermark": self.watermark, "before": self.before} if self.watermark is not None else {}),
                **({"now": self.now} if self.now is not None else {}),
                **({"tables": dict(self.tables)} if self.tables else {})}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StepClock:
        watermark, now = doc.get("watermark"), doc.get("now")
        return cls(int(watermark) if watermark is not None else None, int(now) if now is not None else None,
                   dict(doc.get("tables") or {}), before_of(doc, watermark))


def before_of(doc: Mapping[str, Any], watermark: Any, key: str = "before") -> int | None:
    """A recorded step's watermark before it; a step recorded without one (before there was an order of rows
    around the advance) judged every row against its own watermark, so it still does."""
    value = doc[key] if key in doc else watermark
    return int(value) if value is not None else None


def from_manifest(manifest: Mapping[str, Any] | None) -> dict[int, StepClock]:
    """The clocks of the steps a checkpoint's manifest recorded, kept there as parts apart (``watermarks``,
    ``befores``, ``times``, ``tables``: by step, each only when the pipeline has it, ``coordinator/checkpoints.py``)."""
    doc = manifest or {}
    marks, times, tables, befores = (doc.get(part) or {} for part in ("watermarks", "times", "tables", "befores"))
    return {int(s): StepClock.from_json({"watermark": marks.get(s), "now": times.get(s), "tables": tables.get(s),
                                         **({"before": befores[s]} if s in befores else {})})
            for s in (doc.get("steps") or {})}
