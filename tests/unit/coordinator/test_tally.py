"""Each input row and dead letter counted once: re-runs, replays and resumes add nothing."""

from __future__ import annotations

from ftpipeline.coordinator.tally import Tally


def test_a_re_run_or_replayed_task_counts_nothing_and_a_never_reported_one_counts_at_its_re_run() -> None:
    tally = Tally()
    assert tally.done("src", 0, 1, 100, 2)
    assert tally.done("src", 1, 1, 100, 0)
    assert tally.done("agg", 0, 1, 0, 0)
    assert not tally.done("src", 0, 1, 100, 2)     # a recovery re-ran it, or a rollback replayed it
    assert tally.done("src", 0, 2, 100, 1)         # its first run never reported (its worker died): counted once
    assert (tally.source_rows, tally.dead_letters) == (300, 3)


def test_a_checkpoint_carries_the_counts_up_to_its_boundary_and_a_resume_starts_from_them() -> None:
    before = Tally()
    for step in range(1, 6):
        before.done("src", 0, step, 10, step % 2)
    manifest = {"boundary": 3, "tally": before.up_to(3)}
    assert manifest["tally"] == {"source_rows": 30, "dead_letters": 2, "late_records": 0, "step": 3,
                                 "late_by_stage": {}}
    resumed = Tally()
    resumed.restore(manifest)
    assert not resumed.done("src", 0, 3, 10, 1)    # before the cut: already counted in the manifest
    for step in (4, 5, 6):
        assert resumed.done("src", 0, step, 10, step % 2)
    assert (resumed.source_rows, resumed.dead_letters) == (60, 3)


def test_a_checkpoint_without_counts_starts_from_zero() -> None:
    tally = Tally()
    tally.restore({"boundary": 4})
    assert tally.done("src", 0, 1, 10, 0) and tally.source_rows == 10


def test_a_committed_checkpoint_folds_its_steps_into_the_base_and_the_counts_stay() -> None:
    tally = Tally()
    for step in range(1, 7):
        tally.done("src", 0, step, 10, 1)
    tally.settle(4)
    assert (tally.source_rows, tally.dead_letters) == (60, 6)
    assert len(tally._rows) == 2  # steps 5 and 6 only
    assert not tally.done("src", 0, 3, 10, 1)  # a step up to the checkpoint never counts again
    assert not tally.done("src", 0, 5, 10, 1)
    assert tally.up_to(5) == {"source_rows": 50, "dead_letters": 5, "late_records": 0, "step": 5,
                              "late_by_stage": {}}


def test_late_records_are_counted_once_per_step_and_travel_with_a_checkpoint() -> None:
    tally = Tally()
    assert tally.done("win", 0, 1, 0, 0, late=3)
    assert not tally.done("win", 0, 1, 0, 0, late=3)  # a replay finds the same late records
    assert tally.done("win", 0, 2, 0, 0, late=1)
    manifest = {"boundary": 1, "tally": tally.up_to(1)}
    resumed = Tally()
    resumed.restore(manifest)
    assert resumed.done("win", 0, 2, 0, 0, late=1)
    assert resumed.done("other", 1, 2, 0, 0, late=2)
    assert (tally.late, resumed.late) == (4, 6)
    assert resumed.late_by_stage() == {"win": 4, "other": 2}  # each stage's, through the checkpoint too
    resumed.settle(2)
    assert resumed.late_by_stage() == {"win": 4, "other": 2} == resumed.up_to(2)["late_by_stage"]
