"""The chaos tier: a fixed sample of fault schedules, every fault kind at least once, on all three topologies.

Each schedule runs the pipeline as a user would (``ftpipeline run``) against
real ZooKeeper, Redis, workers and Spark, breaks them for real at the steps
it names (``runner.py``), and passes only when the run finished by itself
and its output and dead letters equal the oracle's: 0 rows lost, 0 rows
duplicated. ``bench/chaos.py --schedules N`` draws and runs any number.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .runner import FAULTS, Schedule, run_schedule

# six runs: the first three hold every fault kind but the loss of every worker between them, three or
# four each; the others pair faults whose recoveries meet (a resumed coordinator then an emptied Redis,
# a cut during a loss, ...), and the last ends with every worker killed at once
SAMPLE = (
    Schedule(1, "clickstream", (("two-workers", 3), ("zookeeper-cut", 5), ("redis-lost", 8),
                                ("storage-unwritable", 10)), cut_s=12),
    Schedule(2, "files", (("zombie", 3), ("redis-restart", 5), ("worker-kill", 7), ("zookeeper-restart", 9))),
    Schedule(3, "pipelined", (("kill-in-checkpoint", 3), ("coordinator-kill", 6), ("worker-stop", 8),
                              ("redis-freeze", 10))),
    Schedule(4, "files", (("coordinator-kill", 4), ("worker-evict", 6), ("redis-lost", 8))),
    Schedule(5, "pipelined", (("zookeeper-cut", 4), ("worker-kill", 7)), cut_s=10),
    Schedule(6, "clickstream", (("zombie", 4), ("storage-unwritable", 6), ("all-workers", 9))),
)


def test_the_sample_covers_every_fault_and_topology() -> None:
    assert len(SAMPLE) >= 6
    assert {f for s in SAMPLE for f, _ in s.faults} == set(FAULTS)
    assert {s.topology for s in SAMPLE} == {"clickstream", "files", "pipelined"}
    assert Schedule.draw(7, seed=3) == Schedule.draw(7, seed=3)  # a schedule is rerun by its number


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from ftpipeline.worker.session import build_session

    session = build_session("local[2]", {}, tmp_path_factory.mktemp("chaos-spark"), "ftpipeline-chaos-oracle")
    yield session
    session.stop()


@pytest.mark.integration
@pytest.mark.parametrize("schedule", SAMPLE, ids=lambda s: f"{s.number}-{s.topology}-{s.label().replace(', ', '+')}")
def test_a_fault_schedule_ends_equal_to_the_oracle(schedule: Schedule, tmp_path: Path, spark: object) -> None:
    outcome = run_schedule(schedule, tmp_path, spark)
    print(outcome.row())
    if not outcome.ok:  # what the run decided, before its last lines: the losses and pauses that led there
        said = (tmp_path / "output.log").read_text()
        decisions = [line[:300] for line in said.splitlines()
                     if any(w in line for w in (" lost", "declared", "unreachable", "aborted", "rolled back"))]
        raise AssertionError(f"{outcome.row()}\n{outcome.comparisons}\n" + "\n".join(decisions[:40])
                             + f"\n...\n{said[-3000:]}")
