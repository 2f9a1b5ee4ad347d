"""Event time: each record's time as its source says, and the watermark that says how far it has got.

A source that declares ``eventTime`` reads a column of event time with its
records. Every source task reports the largest event time its channel read
in its step (``columns.span``: the smallest too, to tell when a channel's time goes back); the coordinator folds those reports into
the pipeline's watermark (``watermarks.Watermarks``) and records the
watermark of each step in the step log and the command log *before* the
step's tasks go out, as it records the step's offsets. So a step re-run by
lineage recovery, replayed after a rollback or a coordinator restart, or
run on a rescaled pipeline, sees the watermark it first ran with, and the
same windows close in it: event-time results are as deterministic as the
offsets.

The watermark of step S is computed from the reports of the steps before S
(as Spark Structured Streaming uses the previous micro-batch's event times),
so in step S the watermark comes before S's records: a record of S is late
when its window closed at or before S's watermark (``operators/window.py``).
"""

from ftpipeline.eventtime.columns import END_OF_INPUT, EventTimeError, micros, span

__all__ = ["END_OF_INPUT", "EventTimeError", "micros", "span"]
