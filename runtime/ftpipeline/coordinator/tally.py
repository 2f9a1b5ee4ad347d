"""The run's figures, each input row and dead letter counted once, whatever the run went through.

A step's source task can complete more than once: a recovery re-runs the
tasks a lost worker held, a rollback (a Redis that came back empty, the
checkpoint strategy) replays every step after the cut, a resumed run replays
the steps after its checkpoint; and a task of a lost worker may never report
at all, its rows read again by its re-run. Counting completions would count
some rows twice and others never; counting first completions only, by what
they read, counts each once.

So a completion is keyed by the work it did, ``(stage, channel, step)``,
whose input is fixed by the step log: the first completion of a key adds its
rows read (a source task) and its dead letters; a later one adds nothing. The
counts kept in Redis cannot serve: a Redis that comes back empty takes them
with it. And the counts up to a checkpoint's boundary travel in its manifest,
so a resumed run starts from them and counts the steps it replays once too.

    (none) --fresh run--> COUNTING from zero
    (none) --resume from a checkpoint--> COUNTING from its manifest's counts (the steps up to its boundary)
    COUNTING --a completion of a key not seen--> COUNTING (+ its rows, + its dead letters)
    COUNTING --a completion of a key seen before--> COUNTING (unchanged)
    COUNTING --a checkpoint at boundary B--> its manifest carries the counts of steps <= B, and
                                             they fold into the base (only later steps stay keyed)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, int, int]  # stage, channel, step


@dataclass
class Tally:
    base_rows: int = 0               # counted up to ``base_step`` by the run resumed from (a manifest's)
    base_dead: int = 0
    base_step: int = 0
    _rows: dict[Key, int] = field(default_factory=dict)
    _dead: dict[Key, int] = field(default_factory=dict)
    base_late: int = 0
    _late: dict[Key, int] = field(default_factory=dict)  # records behind the watermark (eventtime/)
    base_late_by: dict[str, int] = field(default_factory=dict)  # ``base_late`` per stage

    def done(self, stage: str, channel: int, step: int, source_rows: int, dead_letters: int, late: int = 0) -> bool:
        """A task completed: ``source_rows`` it read (0 unless a source), ``dead_letters`` it found. Whether it
        was the first completion of its work (what the run counts)."""
        key = (stage, channel, step)
        if step <= self.base_step or key in self._rows:
            return False
        self._rows[key] = source_rows
        if dead_letters:
            self._dead[key] = dead_letters
        if late:
            self._late[key] = late
        return True

    @property
    def source_rows(self) -> int:
        return self.base_rows + sum(self._rows.values())

    @property
    def dead_letters(self) -> int:
        return self.base_dead + sum(self._dead.values())

    @property
    def late(self) -> int:
        return self.base_late + sum(self._late.values())

    def late_by_stage(self, boundary: int | None = None) -> dict[str, int]:
        """Each stage's late records (of the steps up to ``boundary``; None: all)."""
        out = dict(self.base_late_by)
        for (stage, _, s), n in self._late.items():
            if boundary is None or s <= boundary:
                out[stage] = out.get(stage, 0) + n
        return out

    def up_to(self, boundary: int) -> dict[str, Any]:
        """The counts of the steps up to ``boundary``: what a checkpoint cut there carries."""
        rows = self.base_rows + sum(n for (_, _, s), n in self._rows.items() if s <= boundary)
        dead = self.base_dead + sum(n for (_, _, s), n in self._dead.items() if s <= boundary)
        late = self.base_late + sum(n for (_, _, s), n in self._late.items() if s <= boundary)
        return {"source_rows": rows, "dead_letters": dead, "late_records": late, "step": boundary,
                "late_by_stage": self.late_by_stage(boundary)}

    def restore(self, manifest: dict[str, Any] | None) -> None:
        """Counting again from a checkpoint (None: the very beginning): every step after it is counted anew."""
        counts = (manifest or {}).get("tally") or {}
        boundary = int((manifest or {}).get("boundary", 0))
        self._rebase(int(counts.get("source_rows", 0)), int(counts.get("dead_letters", 0)),
                     boundary if counts else 0, int(counts.get("late_records", 0)),  # an older version's: none
                     {str(k): int(v) for k, v in (counts.get("late_by_stage") or {}).items()})

    def settle(self, boundary: int) -> None:
        """A checkpoint at ``boundary`` committed: no step up to it runs again for the run's figures (a
        rollback goes back to it at the earliest), so its keys fold into the base and the tally stays as
        small as the steps after the newest checkpoint."""
        counts = self.up_to(boundary)
        self._rebase(counts["source_rows"], counts["dead_letters"], boundary, counts["late_records"],
                     counts["late_by_stage"])

    def _rebase(self, rows: int, dead: int, step: int, late: int = 0, late_by: dict[str, int] | None = None) -> None:
        self.base_rows, self.base_dead, self.base_step, self.base_late = rows, dead, step, late
        self.base_late_by = dict(late_by or {})
        self._rows = {k: n for k, n in self._rows.items() if k[2] > step}
        self._dead = {k: n for k, n in self._dead.items() if k[2] > step}
        self._late = {k: n for k, n in self._late.items() if k[2] > step}
