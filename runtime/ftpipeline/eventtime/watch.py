"""What a run says about its event time as it goes: records dropped as late, and a watermark held back.

Why: event time fails quietly. A window without ``lateData`` drops the
records behind the watermark and its output simply holds less; one source
channel that reads old records, or none, holds the whole pipeline's
watermark back, and windows close late or only at the end. Each of these
is said once, where it begins, in a log line, to the observer (a line on the
terminal, a Warning Event on Kubernetes) and in a metric naming the stage
or channel:

- ``late-dropped``: a stage with no ``lateData`` dropped late records (the
  count so far; the summary has the total);
- ``late-share``: a stage's late records passed 1% of the rows it took (and
  at least :data:`LATE_MIN` of them);
- ``held-back``: one channel held the watermark :data:`HELD_STEPS` steps in
  a row, more than :func:`held_limit` behind the newest channel;
- ``no-input``: a source channel ended without a record (no file or no
  partition of its own): it no longer holds the watermark back;
- ``went-back``: a source channel read a record further behind the newest
  it had read than its bound allows (its next file starts before the last
  one ended, say): what is behind the watermark is late;
- ``timer-behind``: a keyed function set an event-time timer more than a day
  behind the watermark (a time in the wrong unit, most likely: the API's is
  milliseconds), which fires at once.

One channel's state for ``held-back``::

    not holding --holds the watermark, far behind--> holding (n steps)
    holding (n) --again--> holding (n + 1) --n reaches HELD_STEPS--> warned (once per episode)
    any --another channel holds it, or it catches up--> not holding
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping

from ftpipeline.eventtime.watermarks import Watermarks
from ftpipeline.lineage.naming import Channel
from ftpipeline.spec.model import PipelineSpec

log = logging.getLogger("ftpipeline.eventtime")
LATE_SHARE, LATE_MIN = 0.01, 100
HELD_STEPS = 10
Say = Callable[[str, str, str], None]  # (kind, what it is about: a stage or channel, the message)


def held_limit(bound_us: int) -> int:
    """How far behind the newest channel a channel may hold the watermark before it is said (us)."""
    return max(60_000_000, 10 * bound_us)


class EventTimeWatch:
    def __init__(self, spec: PipelineSpec, say: Say, held_gauge: Callable[[str, float], None]) -> None:
        self.say, self.held_gauge = say, held_gauge
        self.keeps_late = {s.name: s.late_data is not None or s.late_topic is not None for s in spec.stages}
        self.rows_in: dict[str, int] = {}
        self.late: dict[str, int] = {}
        self.said: set[tuple[str, str]] = set()
        self.holding: tuple[Channel, int] | None = None  # the channel holding the watermark far behind, how long
        self.newest: dict[Channel, int] = {}             # each source channel's newest event time read (us)

    def _once(self, kind: str, about: str, message: str) -> None:
        if (kind, about) in self.said:
            return
        self.said.add((kind, about))
        log.warning(message, extra={"kind": kind, "about": about})
        self.say(kind, about, message)

    # --- late records ----------------------------------------------------------------
    def task_done(self, stage: str, step: int, rows_in: int, late: int) -> None:
        """A keyed operator's task completed for the first time (a re-run counts nothing again)."""
        self.rows_in[stage] = self.rows_in.get(stage, 0) + rows_in
        if not late:
            return
        self.late[stage] = self.late.get(stage, 0) + late
        total, taken = self.late[stage], self.rows_in[stage]
        if not self.keeps_late.get(stage, False):
            self._once("late-dropped", stage, f"stage {stage!r} dropped {total:,} late records by step {step} "
                                              "(records behind the watermark; it has no lateData to keep them)")
        if taken >= LATE_MIN and total > LATE_SHARE * taken:
            self._once("late-share", stage, f"stage {stage!r}: {total:,} of the {taken:,} rows it took were late "
                                            f"({100 * total / taken:.1f}%, above {100 * LATE_SHARE:.0f}%) by step "
                                            f"{step}: the input is further out of order than its maxOutOfOrderness")

    def warned(self, stage: str, message: str) -> None:
        """An operator said something of its event time (a keyed function's timer set far behind the watermark:
        ``timer-behind``)."""
        self._once("timer-behind", stage, message)

    # --- source channels ------------------------------------------------------------
    def read(self, channel: Channel, step: int, smallest: int | None, largest: int | None, bound: int) -> None:
        """A source task read event times from ``smallest`` to ``largest`` (us)."""
        newest = self.newest.get(channel)
        if smallest is not None and newest is not None and newest - smallest > bound:
            self._once("went-back", channel.key(),
                       f"source channel {channel.key()} went back {(newest - smallest) / 1e6:,.0f} s in event time "
                       f"at step {step}, more than its maxOutOfOrderness ({bound / 1e6:g} s): its records behind "
                       "the watermark are late (a later file starting before the one before it ended?)")
        if largest is not None:
            self.newest[channel] = max(largest, newest if newest is not None else largest)

    def ended_empty(self, channel: Channel) -> None:
        self._once("no-input", channel.key(), f"source channel {channel.key()} has nothing to read (no file or "
                                              "partition of its own): it does not hold the watermark back")

    def decided(self, watermarks: Watermarks, finished: Collection[Channel]) -> None:
        """A step's watermark was decided, with these source channels ``finished``."""
        if not watermarks.enabled:
            return
        read = watermarks.maxima()
        for channel in finished:
            if channel in watermarks.bound and channel not in read:
                self.ended_empty(channel)
        self.stepped(watermarks.holder(finished), watermarks.bound)

    def stepped(self, holder: tuple[Channel, int | None] | None, bounds: Mapping[Channel, int]) -> None:
        """The watermark of a step was decided; ``holder``: the channel it came from and how far that is behind
        the newest channel (us; None: it has read nothing yet), None when no single channel held it."""
        if holder is None or (holder[1] is not None and holder[1] <= held_limit(bounds.get(holder[0], 0))):
            if self.holding is not None:
                self.held_gauge(self.holding[0].key(), 0.0)
            self.holding = None
            return
        channel, behind = holder
        steps = self.holding[1] + 1 if self.holding is not None and self.holding[0] == channel else 1
        if self.holding is not None and self.holding[0] != channel:
            self.held_gauge(self.holding[0].key(), 0.0)
        self.holding = (channel, steps)
        self.held_gauge(channel.key(), behind / 1e6 if behind is not None else float("inf"))
        if steps == HELD_STEPS:
            self.said.discard(("held-back", channel.key()))  # a new episode is said again
            how = (f"{behind / 1e6:,.0f} s behind the newest channel" if behind is not None else
                   "having read no record while the others read on")
            self._once("held-back", channel.key(),
                       f"source channel {channel.key()} has held the watermark back for {steps} steps, {how}: "
                       "windows close only when it catches up (set eventTime.idleTimeout if it may pause, or "
                       "spread the input over the channels)")
