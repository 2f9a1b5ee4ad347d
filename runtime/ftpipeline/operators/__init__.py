"""Keyed stateful operators: what a stateful stage does with a step's rows, over the state backend.

Every stateful stage kind (a window, and later a deduplication, a join) is
an :class:`~ftpipeline.operators.base.Operator`: given the step's rows, the
step's watermark and its channel's keyed state (``state/``), it answers the
rows to send on, the records it found late, and the dead letters. The
executor runs all of them the same way, in a step, in a lineage rebuild
(step by step, nothing emitted) and after a restore or a rescale, so none
wires itself into the executor; their state is checkpointed, restored and
re-partitioned by key as any other. This is Flink's operator contract
(``processElement`` with keyed state, ``onEventTime`` through timers) cut
to lockstep steps: the watermark of a step comes before its records.
"""
