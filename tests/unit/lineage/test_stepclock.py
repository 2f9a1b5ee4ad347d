"""A step's clock in each place it is recorded: the step log's record, a checkpoint's manifest, a command-log
snapshot (both keep its parts apart, as they did before there were clocks: what older versions wrote reads
the same)."""

from __future__ import annotations

import json

from ftpipeline.commandlog.state import ClusterState
from ftpipeline.control.store import StepRecord
from ftpipeline.lineage.naming import Channel
from ftpipeline.lineage.stepclock import StepClock, from_manifest


def test_a_record_keeps_only_what_its_step_has_and_reads_back_equal() -> None:
    bare = StepRecord(4, {Channel("views", 0): (0, 10)}, "records")
    assert set(json.loads(bare.to_json())) == {"step", "reason", "offsets"}
    full = StepRecord(5, {Channel("views", 0): (10, 20)}, "records", StepClock(7_000, 1_700_000_000_000_000, {"ads": 3}))
    assert StepRecord.from_json(full.to_json()) == full and full.watermark == 7_000 and full.tables == {"ads": 3}


def test_a_manifest_and_a_snapshot_written_with_the_parts_apart_read_as_clocks() -> None:
    manifest = {"steps": {"3": {}, "4": {}, "5": {}}, "watermarks": {"3": 9_000, "4": None, "5": 9_500},
                "befores": {"5": 9_000}, "times": {"3": 11, "4": 12}, "tables": {"4": {"ads": "v2"}}}
    # a step written before the watermark before it was recorded (3) judged every row by its own: it still does
    assert from_manifest(manifest) == {3: StepClock(9_000, 11, before=9_000), 4: StepClock(None, 12, {"ads": "v2"}),
                                       5: StepClock(9_500, before=9_000)}
    assert from_manifest(None) == {}
    snapshot = json.loads(ClusterState().to_json())
    snapshot.update(started={"3": {"src.0": [0, 5]}, "4": {"src.0": [5, 9]}, "5": {"src.0": [9, 12]}},
                    marks={"3": 9_000, "5": 9_500}, befores={"5": None}, times={"3": 11, "4": 12},
                    tables={"4": {"ads": 2}})
    state = ClusterState.from_json(json.dumps(snapshot))
    assert state.clocks == {3: StepClock(9_000, 11, before=9_000), 4: StepClock(None, 12, {"ads": 2}),
                            5: StepClock(9_500)}
    written = json.loads(state.to_json())  # written back with the parts apart
    assert written["marks"] == {"3": 9_000, "5": 9_500} and written["befores"] == {"3": 9_000, "5": None}
