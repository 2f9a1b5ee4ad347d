"""The Delta barrier on a real Spark with delta-spark: one commit per step, in order, a replay and a late
write skipped, the table readable by plain Spark afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_each_step_is_one_commit_in_order_and_a_replay_or_a_late_write_adds_nothing(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tests.integration.barrier.delta_scenario", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["gt_before"] == 0
    assert "cannot release step 2 of sink table before step 1" in seen["out_of_order"]
    assert (seen["first"], seen["again"], seen["second"], seen["gt_after"]) == (True, False, True, 2)
    assert seen["staging_left"] == [], "released steps leave no staged parts"
    assert seen["rows"] == 12 and seen["rows_after_late_write"] == 12, seen
    assert seen["versions_before_late_write"] == 2, "one commit per step"
