"""choose_strategy and snapshots_of: picking lineage or checkpoint recovery from the tables and the manifest."""

from __future__ import annotations

from typing import Any

import pytest

from ftpipeline.coordinator.recovery import choose_strategy, snapshots_of
from ftpipeline.lineage.cemetery import IntervalSet
from ftpipeline.lineage.naming import Channel, ObjectName, Task, TaskKind, WorkerId
from ftpipeline.lineage.planner import plan_recovery
from tests.unit.lineage.history import PIPELINE, W0, W1, History, graph

AGG0, AGG1 = Channel("agg", 0), Channel("agg", 1)


def manifest(**steps: int) -> dict[str, Any]:
    """``agg_1=2`` -> states {"agg.1": {"step": 2, ...}}."""
    states = {}
    for key, step in steps.items():
        stage, index = key.rsplit("_", 1)
        states[f"{stage}.{index}"] = {"step": step, "path": f"epoch-1/state/{stage}.{index}.parquet"}
    return {"states": states}


def ran(h: History, steps: int) -> History:
    for step in range(1, steps + 1):
        h.run_step(step)
    h.gc()
    return h


def colocated() -> History:
    """Default placement: w1 holds events.1, clean.1, agg.1, out.1."""
    return ran(History(graph(), [W0, W1]), 4)


def stateless_inputs_on_w0() -> History:
    """w1 holds only agg.1 and out.1: every input of agg.1 is produced on w0."""
    h = History(graph(), [W0, W1])
    h.placement[Channel("events", 1)] = W0
    h.placement[Channel("clean", 1)] = W0
    return ran(h, 4)


def agg1_inputs(h: History, steps: range) -> list[ObjectName]:
    return [o for s in steps for o in h.g.inputs_of(Task(TaskKind.AGGREGATE, "agg", 1, s))]


def collect(h: History, objs: list[ObjectName]) -> None:
    """What the GC does once a checkpoint covered a stateful consumer's inputs."""
    for obj in objs:
        h.ct.setdefault(obj.edge.key(), IntervalSet()).add(obj.seq)
        h.pt.pop(obj.key(), None)
        for names in h.not_.values():
            names.discard(obj.key())


# --- explicit strategies ---------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["lineage", "checkpoint"])
def test_explicit_strategy_passes_through(strategy: str) -> None:
    h = colocated()
    for m in (None, manifest(agg_0=4, agg_1=4)):
        assert choose_strategy(strategy, h.g, h.view(), W1, m) == strategy


# --- auto ------------------------------------------------------------------------------------

def test_auto_is_lineage_when_the_dead_worker_holds_no_stateful_channel() -> None:
    h = History(graph(), [W0, W1])
    h.placement[AGG1] = W0
    ran(h, 3)
    assert choose_strategy("auto", h.g, h.view(), W1, None) == "lineage"
    # the same tables with agg.1 on w1 and a checkpoint that has no snapshot of it: rollback
    h.placement[AGG1] = W1
    assert choose_strategy("auto", h.g, h.view(), W1, manifest(agg_0=2)) == "checkpoint"


def test_auto_is_lineage_before_the_first_checkpoint() -> None:
    """A rollback would go back to the very beginning and re-run every channel; lineage rebuilds the lost
    stateful channel from nothing with the inputs its consumers kept, and re-runs nothing else."""
    h = stateless_inputs_on_w0()
    assert choose_strategy("auto", h.g, h.view(), W1, None) == "lineage"
    assert choose_strategy("auto", h.g, h.view(), W1, {}) == "lineage"
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1, snapshots=snapshots_of(None))
    assert [(t.kind, t.first, t.step) for _, t in plan.tasks] == [(TaskKind.REBUILD, 1, 4)]


def test_auto_is_checkpoint_when_the_lost_channel_has_no_snapshot() -> None:
    h = stateless_inputs_on_w0()
    assert choose_strategy("auto", h.g, h.view(), W1, manifest(agg_0=2)) == "checkpoint"
    assert choose_strategy("auto", h.g, h.view(), W1, manifest(agg_0=2, agg_1=2)) == "lineage"


def test_auto_is_lineage_when_every_input_since_the_snapshot_is_on_a_survivor() -> None:
    h = stateless_inputs_on_w0()
    collect(h, agg1_inputs(h, range(1, 3)))             # the checkpoint at step 2 let them go
    m = manifest(agg_0=2, agg_1=2)
    assert choose_strategy("auto", h.g, h.view(), W1, m) == "lineage"
    # and the lineage plan exists: rebuild from the snapshot with the kept inputs, nothing regenerated
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1, snapshots=snapshots_of(m))
    assert [(t.kind, t.first, t.step) for _, t in plan.tasks] == [(TaskKind.REBUILD, 3, 4)]


def test_auto_is_checkpoint_when_an_input_since_the_snapshot_is_gone() -> None:
    h = stateless_inputs_on_w0()
    collect(h, agg1_inputs(h, range(1, 3)))
    # a snapshot at step 1 would need step 2's inputs, which were collected
    assert choose_strategy("auto", h.g, h.view(), W1, manifest(agg_0=2, agg_1=1)) == "checkpoint"


def test_auto_is_checkpoint_when_an_input_since_the_snapshot_was_on_the_dead_worker() -> None:
    h = colocated()                                     # clean.1 -> agg.1 objects live on w1
    on_dead = ObjectName("clean", 1, 3, "agg", 1, 1).key()
    assert h.pt[on_dead] == W1
    assert choose_strategy("auto", h.g, h.view(), W1, manifest(agg_0=2, agg_1=2)) == "checkpoint"
    # only the inputs since the snapshot matter: one covering step 4 needs none
    assert choose_strategy("auto", h.g, h.view(), W1, manifest(agg_0=4, agg_1=4)) == "lineage"


def test_auto_checks_every_lost_stateful_channel() -> None:
    h = History(graph(), [W0, W1])
    for ch in ("events", "clean"):
        h.placement[Channel(ch, 1)] = W0
    h.placement[AGG0] = W1                              # w1 holds both aggregates
    ran(h, 4)
    view = h.view()
    assert choose_strategy("auto", h.g, view, W1, manifest(agg_0=2, agg_1=2)) == "lineage"
    assert choose_strategy("auto", h.g, view, W1, manifest(agg_1=2)) == "checkpoint"
    assert choose_strategy("auto", h.g, view, W1, manifest(agg_0=2)) == "checkpoint"


# --- snapshots_of ----------------------------------------------------------------------------

def test_snapshots_of_nothing_is_empty() -> None:
    assert snapshots_of(None) == {}
    assert snapshots_of({}) == {}
    assert snapshots_of({"states": {}}) == {}


def test_snapshots_of_a_manifest() -> None:
    m = {"epoch": 3, "states": {
        "agg.1": {"channel": "agg.1", "step": "2", "path": "epoch-3/state/agg.1.parquet", "rows": 1, "bytes": 9},
        "agg.0": {"channel": "agg.0", "step": 4, "path": "", "rows": 0, "bytes": 0},
    }}
    assert snapshots_of(m) == {AGG1: (2, "epoch-3/state/agg.1.parquet"), AGG0: (4, "")}


# --- a chained aggregate whose consumer's snapshot is older than its own -----------------------

CHAINED = PIPELINE.replace("- {name: events, parallelism: 2", "- {name: events, parallelism: 1").replace(
    "- {name: clean, parallelism: 2", "- {name: clean, parallelism: 1").replace(
    "    - {name: out, parallelism: 2, inputs: [{stage: agg}], sink: {parquet: {path: o}}}",
    "    - name: top\n"
    "      parallelism: 1\n"
    "      inputs: [{stage: agg}]\n"
    "      aggregate: {keyBy: [k], aggregations: [{name: m, op: count}]}\n"
    "    - {name: out, parallelism: 1, inputs: [{stage: top}], sink: {parquet: {path: o}}}",
)


def test_auto_never_picks_a_lineage_plan_that_cannot_be_made() -> None:
    """events(1) -> clean(1) -> agg(2) -> top(1) -> out(1): w1 holds only agg.1.

    Checkpoint 1 was cut with agg at step 3 and top at step 2 (w0 checkpointed before top
    folded step 3; agg.1@3 -> top.0 crossed the cut and was saved in flight). After the
    commit, agg's inputs 1..3 and top's inputs 1..2 were collected. Step 4 ran; w1 dies.
    """
    h = History(graph(CHAINED), [W0, W1])
    assert [ch for ch, w in h.placement.items() if w == W1] == [AGG1]
    for step in range(1, 5):
        h.run_step(step)
    h.gc()
    collect(h, [o for s in range(1, 4) for c in (0, 1) for o in h.g.inputs_of(Task(TaskKind.AGGREGATE, "agg", c, s))])
    collect(h, [o for s in range(1, 3) for o in h.g.inputs_of(Task(TaskKind.AGGREGATE, "top", 0, s))])
    m = manifest(agg_0=3, agg_1=3, top_0=2)
    view = h.view()
    strategy = choose_strategy("auto", h.g, view, WorkerId("w1"), m)
    if strategy == "lineage":
        plan_recovery(h.g, view, W1, [W0], epoch=1, snapshots=snapshots_of(m))
    else:
        assert strategy == "checkpoint"


def test_a_recovery_says_what_it_re_ran_and_where() -> None:
    from ftpipeline.coordinator.recovery import RecoveryRecord
    from ftpipeline.lineage.naming import Channel

    task = Task(TaskKind.REBUILD, "agg", 1, step=4, first=1)
    lineage = RecoveryRecord(W1, "lineage", 2, ((W0, task), (W0, task)), {}, 0.0, seconds=0.2161, planned_rows=24_508,
                             lost_rows=24_508, rebuilt=(Channel("agg", 1),))
    assert lineage.describe() == ("lineage recovery of worker w1 in 216 ms: 2 tasks re-run on 1 survivor, about "
                                  "24,508 rows read again (24,508 rows of work lost with it); stateful channels "
                                  "rebuilt: agg.1")
    rollback = RecoveryRecord(W1, "checkpoint", 3, ((W0, task),), {}, 0.0, seconds=0.05, lost_rows=10, boundary=5,
                              replay_to=8)
    assert rollback.describe() == ("checkpoint recovery of worker w1 in 50 ms: rolled back to the checkpoint at step "
                                   "5, reopened on 1 survivor with 1 restore task, then steps 6-8 replay on every channel (10 "
                                   "rows of work lost with it)")
    nothing = RecoveryRecord(W1, "checkpoint", 3, (), {}, 0.0, boundary=0, replay_to=0)
    assert "rolled back to the very beginning (no checkpoint), reopened on 0 survivors (" in nothing.describe()
    reopened = RecoveryRecord(W1, "checkpoint", 3, (), {}, 0.0, boundary=5, replay_to=6,
                              placement={Channel("agg", 0): W0, Channel("agg", 1): WorkerId("w2")})
    assert "rolled back to the checkpoint at step 5, reopened on 2 survivors, then steps 6-6 replay" in \
        reopened.describe()
