"""The pipeline's watermark, decided by the coordinator step by step and recorded with each step.

Each source channel that reads event time reports, with every task it
completes, the largest event time the task read (``observe``). A channel's
watermark is the largest event time it has read less its source's
``maxOutOfOrderness``; the pipeline's is the smallest of those over the
channels that are not idle, never lower than the one before. Before the
first report of every channel it is unknown (None: no window closes).
A channel that has read no record for ``idleTimeout`` (wall clock) stops
holding it back until it reads again (Flink's ``withIdleness``); if every
channel is idle the watermark is the largest of theirs, so windows still
close once the input pauses.

The value is decided when a step is triggered (``next``) and written with
the step's offsets before its tasks go out (``record``); a replay of the
step takes the recorded value instead. After every bounded source ended,
one more step runs with :data:`END_OF_INPUT`, which makes every window final
(``end``), as Flink does at the end of a bounded input.

One channel's view::

    unknown --a report with an event time--> maximum m (its watermark m - bound)
    any     --no record for idleTimeout since it last read one (or since the
              coordinator first planned a step with it)--> idle (ignored by the minimum)
    idle    --a report with rows--> active again
    any     --read to the end of a bounded input, or no slot of its own (no file, no partition)-->
              finished (ignored by the minimum, as Flink's finished and split-less readers)

The pipeline's::

    None --every active channel known--> W = min(m_c - bound_c) --later steps--> max(W, new W) ...
    W --every source ended--> END_OF_INPUT (the last step)

A checkpoint at boundary B carries the watermark of B and each channel's
maximum through B (``cut``), so a restore starts from exactly what the
steps up to B had read; the steps after B replay with their recorded values
and their reports rebuild the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from ftpipeline.eventtime.columns import END_OF_INPUT
from ftpipeline.lineage.naming import Channel
from ftpipeline.spec.model import StageSpec


class Watermarks:
    def __init__(self, sources: Iterable[StageSpec], clock: Callable[[], float]) -> None:
        self.clock = clock
        self.bound: dict[Channel, int] = {}      # source channel -> its maxOutOfOrderness (us)
        self.idle_after: dict[Channel, float] = {}  # seconds without a record before it is idle (0: never)
        for stage in sources:
            if stage.event_time is None:
                continue
            for i in range(stage.parallelism):
                ch = Channel(stage.name, i)
                self.bound[ch] = stage.event_time.max_out_of_orderness_us
                self.idle_after[ch] = stage.event_time.idle_timeout_us / 1e6
        self.base: dict[Channel, int] = {}       # each channel's maximum through ``base_step``
        self.base_step = 0
        self.reports: dict[tuple[Channel, int], int] = {}  # (channel, step) -> the largest event time read
        self.active_at: dict[Channel, float] = {}  # when each last read a record (or was first looked at)
        self.current: int | None = None          # the newest step's recorded watermark
        self.steps: dict[int, int | None] = {}   # step -> its recorded watermark (after base_step)

    @property
    def enabled(self) -> bool:
        return bool(self.bound)

    # --- what the sources read -------------------------------------------------
    def observe(self, channel: Channel, step: int, largest: int | None, rows: int) -> None:
        """A source task of ``channel`` read ``rows`` rows of ``step``, the largest event time ``largest``."""
        if channel not in self.bound:
            return
        if rows:
            self.active_at[channel] = self.clock()
        if largest is not None and step > self.base_step:
            key = (channel, step)
            self.reports[key] = max(largest, self.reports.get(key, largest))

    def maxima(self, through: int | None = None) -> dict[Channel, int]:
        """Each channel's largest event time read in the steps up to ``through`` (all reported: None)."""
        out = dict(self.base)
        for (ch, step), value in self.reports.items():
            if through is None or step <= through:
                out[ch] = max(value, out.get(ch, value))
        return out

    # --- the watermark of the next step -------------------------------------------
    def next(self, finished: Collection[Channel] = ()) -> int | None:
        """The watermark the next step runs with, as of the reports so far (never below the last one).
        ``finished``: source channels with nothing more to read (read to the end of a bounded input, or
        none of its own): as Flink's finished or split-less readers, they hold nothing back."""
        if self.current == END_OF_INPUT:
            return END_OF_INPUT
        marks, idle, done, _ = self._marks(finished)
        if marks is None:
            return self.current  # a channel that has read nothing yet holds the watermark where it is
        candidate = min(marks.values()) if marks else (max(idle) if idle else (max(done) if done else None))
        if candidate is None:
            return self.current
        return candidate if self.current is None else max(self.current, candidate)

    def holder(self, finished: Collection[Channel] = ()) -> tuple[Channel, int | None] | None:
        """The channel the next watermark comes from and how far it is behind the newest channel (us; None: it
        has read nothing yet and holds the watermark where it is); None when no one channel holds it."""
        maxima = self.maxima()
        marks, _, _, waiting = self._marks(finished)
        if marks is None:
            return (waiting, None) if waiting is not None and maxima else None
        if len(marks) < 2:
            return None
        channel = min(marks, key=lambda c: (marks[c], c.key()))
        return channel, max(maxima.values()) - maxima[channel]

    def _marks(self, finished: Collection[Channel]) -> tuple[dict[Channel, int] | None, list[int], list[int],
                                                            Channel | None]:
        """The marks (maximum less bound) of the active channels (None: one has read nothing yet, and which),
        of the idle ones, of the finished ones."""
        maxima, now = self.maxima(), self.clock()
        marks: dict[Channel, int] = {}
        idle: list[int] = []
        done: list[int] = []
        for ch, bound in self.bound.items():
            limit = self.idle_after[ch]
            is_idle = limit > 0 and now - self.active_at.setdefault(ch, now) >= limit
            if ch in finished:
                if ch in maxima:
                    done.append(maxima[ch] - bound)
                continue
            if ch not in maxima:
                if is_idle:
                    continue
                return None, idle, done, ch
            if is_idle:
                idle.append(maxima[ch] - bound)
            else:
                marks[ch] = maxima[ch] - bound
        return marks, idle, done, None

    def record(self, step: int, watermark: int | None) -> None:
        """``step`` runs with ``watermark`` (decided now, or recorded before and replayed)."""
        self.steps[step] = watermark
        if watermark is not None and (self.current is None or watermark > self.current):
            self.current = watermark

    def before(self, step: int) -> int | None:
        """The watermark of the step before ``step``, which rows its advance emits are judged against
        downstream (``eventtime/order.py``); recorded with ``step``."""
        return self.steps.get(step - 1, self.current)

    def end(self) -> bool:
        """Every source ended: does one more step have to run to make every window final?"""
        return self.enabled and self.current != END_OF_INPUT

    def at(self, step: int) -> int | None:
        return self.steps.get(step)

    # --- checkpoints ------------------------------------------------------------
    def cut(self, boundary: int) -> dict[str, Any]:
        """What a checkpoint at ``boundary`` carries."""
        watermark = self.steps.get(boundary, self.current if boundary >= max(self.steps, default=0) else None)
        return {"watermark": watermark,
                "maxima": {ch.key(): v for ch, v in sorted(self.maxima(boundary).items())}}

    def settle(self, boundary: int) -> None:
        """A checkpoint at ``boundary`` committed: the reports up to it fold into the base."""
        self.base = self.maxima(boundary)
        self.base_step = boundary
        self.reports = {k: v for k, v in self.reports.items() if k[1] > boundary}
        self.steps = {s: w for s, w in self.steps.items() if s >= boundary}

    def restore(self, cut: Mapping[str, Any] | None, boundary: int) -> None:
        """Rolled back (or resumed) to a checkpoint at ``boundary`` (None: the beginning)."""
        cut = cut or {}
        self.base = {Channel.parse(c): int(v) for c, v in (cut.get("maxima") or {}).items()}
        self.base_step = boundary
        self.reports = {}
        watermark = cut.get("watermark")
        self.current = int(watermark) if watermark is not None else None
        self.steps = {boundary: self.current} if boundary else {}
        self.active_at = {}  # idleness is measured from the first step after it

    def lag_seconds(self) -> float | None:
        """How far the watermark is behind the newest event time read (the event-time lag)."""
        maxima = self.maxima()
        if self.current is None or self.current == END_OF_INPUT or not maxima:
            return None
        return max(0.0, (max(maxima.values()) - self.current) / 1e6)
