"""Kafka in, Kafka out, exactly once, through the real CLI: workers, the coordinator and a release killed.

Each run reads a topic of the example's click events on a real broker and
writes per-user totals to another topic in transactions; ``--verify`` reads
the output as a downstream consumer would (read_committed) and compares it
row for row with a plain PySpark batch job over the same records: equal
means nothing lost and nothing twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ftpipeline.obs.crash import CRASH_EXIT
from tests.integration.pipelines import kafka_clickstream, run_cli

# (name, extra arguments, environment, recovery strategy): five seeded faults and a run without any
CASES = [
    ("clean", [], {}, "lineage"),
    ("worker", ["--kill-at-step", "3", "--seed", "1"], {}, "lineage"),
    ("rollback", ["--kill-at-step", "5", "--seed", "2"], {}, "checkpoint"),
    ("timed", ["--kill-after", "3", "--seed", "3"], {}, "lineage"),
    # the releasing worker dies with step 3's records of sink channel 0 in an open transaction
    ("in-commit", [], {"FTPIPELINE_CRASH_AFTER": "kafka-produced:5@w0"}, "lineage"),
    # a paused worker, declared lost, wakes up later and finds itself fenced off
    ("zombie", ["--kill-at-step", "4", "--fault", "zombie", "--seed", "4"], {}, "lineage"),
]


def _verified(output: str, summary: dict[str, object]) -> None:
    verdicts = summary.get("verify")
    assert isinstance(verdicts, list) and verdicts, output
    for v in verdicts:
        assert v["equal"] and v["duplicates"] == 0 and v["missing"] == 0, (v, output[-3000:])


@pytest.mark.parametrize("name,args,env,strategy", CASES, ids=[c[0] for c in CASES])
def test_kafka_to_kafka_equals_the_oracle_whatever_is_killed(tmp_path: Path, kafka_bootstrap: str, name: str,
                                                             args: list[str], env: dict[str, str],
                                                             strategy: str) -> None:
    pipeline, data = kafka_clickstream(tmp_path, f"k{name}", kafka_bootstrap, strategy=strategy)
    topic = f"k{name}-clicks"
    run = run_cli(pipeline, tmp_path / "run", "--produce", f"{topic}={data}", "--verify", *args, env=env)
    assert run.code == 0, run.output[-4000:]
    _verified(run.output, run.summary)
    if name != "clean":
        assert run.summary["recoveries"], run.output[-3000:]
    if name == "in-commit":
        assert "lost w0" in run.output


def test_a_coordinator_that_crashes_resumes_and_still_writes_each_step_once(tmp_path: Path,
                                                                           kafka_bootstrap: str) -> None:
    pipeline, data = kafka_clickstream(tmp_path, "kcoord", kafka_bootstrap)
    run_dir = tmp_path / "run"
    crashed = run_cli(pipeline, run_dir, "--produce", f"kcoord-clicks={data}",
                      env={"FTPIPELINE_CRASH_AFTER": "step-committed:4"})
    assert crashed.code == CRASH_EXIT, crashed.output[-3000:]
    resumed = run_cli(pipeline, run_dir, "--resume", "--verify")
    assert resumed.code == 0, resumed.output[-4000:]
    _verified(resumed.output, resumed.summary)
