"""Lost work: what a loss destroyed, in rows read, from the tables alone (``lineage/lost.py``)."""

from __future__ import annotations

from ftpipeline.lineage.lost import lost_work
from ftpipeline.lineage.naming import Channel
from tests.unit.lineage.history import W0, W1, History, graph

# per step on w1 (events.1, clean.1, agg.1, out.1): the source reads 50 rows, clean.1 its one
# 10-row input, agg.1 its two (a hash edge from both clean channels), and the sink is not counted
PER_STEP = 50 + 10 + 20
AGG1 = Channel("agg", 1)


def four_steps() -> History:
    h = History(graph(), [W0, W1])
    for step in range(1, 5):
        h.run_step(step)
    h.gc()
    return h


def test_everything_after_the_cut_on_the_lost_worker_is_lost() -> None:
    h = four_steps()
    assert lost_work(h.g, h.view(), W1, cut=0) == 4 * PER_STEP
    assert lost_work(h.g, h.view(), W1, cut=2, snapshots={AGG1: 2}) == 2 * PER_STEP
    assert lost_work(h.g, h.view(), W1, cut=4, snapshots={AGG1: 4}) == 0
    assert lost_work(h.g, h.view(), W1, cut=4) == 4 * 20  # no snapshot: every fold into agg.1 is lost


def test_pending_tasks_count_what_they_will_read() -> None:
    h = four_steps()
    h.schedule(5)
    h.complete(h.task("events", 0, 5))  # w0's source ran: clean.0 and then agg.* have inputs
    assert lost_work(h.g, h.view(), W1, cut=4, snapshots={AGG1: 4}) == 50  # w1's source; its clean.1 input is not written yet


def test_a_survivors_work_is_not_the_lost_workers() -> None:
    h = four_steps()
    assert lost_work(h.g, h.view(), W0, cut=0) == lost_work(h.g, h.view(), W1, cut=0)  # symmetric placement
    h.placement = {ch: W0 for ch in h.placement}
    assert lost_work(h.g, h.view(), W1, cut=0) == 0


def test_a_stateful_channel_lost_the_folds_since_its_snapshot() -> None:
    h = four_steps()
    assert lost_work(h.g, h.view(), W1, cut=2, snapshots={AGG1: 2}) == 2 * PER_STEP
    # a snapshot older than the cut (the channel was rebuilt from an earlier one): its folds since count
    assert lost_work(h.g, h.view(), W1, cut=2, snapshots={AGG1: 1}) == 2 * PER_STEP + 20
