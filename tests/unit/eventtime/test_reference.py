"""Random chains of 2 to 4 event-time operators (windows, sliding windows, sessions, deduplication, a keyed
function's timers, an interval join heading them, each of its sides raw or through a window of its own) over
random disorder, some records far behind: the runtime's operators, run step by step in Flink's order as a
worker runs them, emit the rows (each in its step) and find
the late records (each with the watermark it missed) that the reference interpreter does, which takes one
record at a time and forwards each watermark after what it caused (``oracle/reference.py``). More seeds:
``python bench/eventtime_reference.py --seeds 2000``."""

from __future__ import annotations

from pathlib import Path

from .chains import by_channel, canonical, chain, reference, runtime
from ftpipeline.oracle.reference import watermarks

SEEDS = range(80)  # about 11 s; the bench command above runs more


def test_random_chains_equal_the_reference_interpreter(tmp_path: Path) -> None:
    late_seen = chained_firings = 0
    for seed in SEEDS:
        join, ops, steps = chain(seed)
        want = reference(join, ops, steps)
        got, used = runtime(join, ops, steps, tmp_path / str(seed))
        assert used == watermarks(by_channel(join, steps), 10_000_000), seed  # the same watermarks, independently
        (rows, late), (want_rows, want_late) = canonical(got), canonical(want)
        assert rows == want_rows, (seed, join, ops, rows - want_rows, want_rows - rows)
        assert late == want_late, (seed, join, ops, late - want_late, want_late - late)
        late_seen += bool(want.late)
        chained_firings += bool(want.rows)
    assert late_seen > len(SEEDS) // 4 and chained_firings > len(SEEDS) // 2  # the cases test something
