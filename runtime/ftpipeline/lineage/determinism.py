"""The determinism check of a keyed function: a re-run that emits other rows than the first run did.

Recovery by lineage re-runs a lost worker's tasks and trusts them to emit
what they emitted before: the consumers downstream already took some of the
first run's objects, and the re-run's must fit with them. Ours are
deterministic; a user's keyed function (``operators/process.py``) is only
if it keeps the contract (time from ``ctx``, randomness from ``ctx.rng``).
So each output object of a ``process`` stage carries a digest of its rows,
and the lineage tables keep the first digest of every object until a
checkpoint covers its step (``digest`` hash, trimmed with the row counts:
``tables.py``). The completion of a re-run compares (``complete_task.lua``):
an object whose digest differs is counted in the task's event as
``diverged``, and the coordinator says so — a log line naming the stage and
task, the ``ftpipeline_nondeterministic_outputs_total`` counter, an Event and
the ``Nondeterministic`` condition on Kubernetes. The run goes on: the check
tells, it cannot undo what consumers already took.

The digest is of the rows as a multiset (sorted first): a step's rows reach
a key in no particular order, and a function may hand them on in that order.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa

DIGEST_BYTES = 12


def rows_digest(table: pa.Table) -> str:
    """The rows of ``table`` in an order of their own, serialised and hashed: equal rows give equal digests."""
    if table.num_rows:
        table = table.sort_by([(name, "ascending") for name in table.column_names])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table.combine_chunks())
    return hashlib.blake2b(sink.getvalue().to_pybytes(), digest_size=DIGEST_BYTES).hexdigest()
