"""The Kafka sink's barrier on a real broker and Redis: each step once, a crash and a zombie fenced."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import redis
from confluent_kafka import KafkaException

from ftpipeline.barrier import kafka as kafka_barrier
from ftpipeline.barrier.existing import prepare_outputs
from ftpipeline.barrier.kafka import KafkaBarrier, KafkaReleaseError, write_part
from ftpipeline.barrier.late import LateTopicBarrier
from ftpipeline.control.store import RunStore
from ftpipeline.kafka.topics import create_topics, read_committed
from ftpipeline.spec.load import parse_pipeline
from ftpipeline.spec.model import PipelineSpec


def pipeline(bootstrap: str, topic: str, existing: str = "fail") -> PipelineSpec:
    text = f"""
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {{name: kb}}
spec:
  entryPoint: m.py
  workers: 1
  kafka: {{bootstrapServers: "{bootstrap}"}}
  stages:
    - {{name: src, parallelism: 2, source: {{generator: {{function: g, rowsPerStep: 10}}}}}}
    - name: out
      parallelism: 2
      inputs: [{{stage: src}}]
      sink: {{kafka: {{topic: {topic}, key: [user]}}, existingOutput: {existing}}}
"""
    spec = parse_pipeline(text, Path("/tmp"), check_entry_point=False)
    return dataclasses.replace(spec, identity=f"kb-{uuid.uuid4().hex[:8]}")


def barrier(spec: PipelineSpec, r: redis.Redis) -> KafkaBarrier:
    stage = spec.stage("out")
    assert stage.kafka_sink is not None
    return KafkaBarrier("out", stage.kafka_sink, 2, spec, RunStore(r, spec.store_key))


def stage_step(b: KafkaBarrier, step: int, tmp: Path, rows: dict[int, list[str]]) -> None:
    for channel in range(2):
        path = tmp / f"part-{step}-{channel}.arrow"
        users = rows.get(channel, [])
        table = pa.table({"user": users, "n": [step] * len(users)}, schema=pa.schema([("user", pa.string()),
                                                                                     ("n", pa.int64())]))
        write_part(path, iter([table]), table.schema)
        b.stage(step, channel, path)


def released(bootstrap: str, topic: str) -> list[tuple[str, int, bytes | None]]:
    import json

    return sorted((json.loads(r.value or b"")["user"], int(r.header("ftpipeline-step") or 0), r.key)
                  for r in read_committed(bootstrap, topic))


@pytest.fixture
def topic(kafka_bootstrap: str, topic_name: str) -> str:
    create_topics(kafka_bootstrap, {topic_name: 3})
    return topic_name


def test_each_step_is_released_once_in_order_and_a_replay_is_skipped(
        kafka_bootstrap: str, topic: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    b = barrier(pipeline(kafka_bootstrap, topic), redis_client)
    assert b.gt_last() == 0
    stage_step(b, 1, tmp_path, {0: ["a", "b"], 1: ["c"]})
    assert b.release(1, 2)
    stage_step(b, 2, tmp_path, {1: ["d"]})  # channel 0 has nothing this step: its GT_last moves all the same
    with pytest.raises(KafkaReleaseError, match="before step 2"):
        b.release(3, 2)
    assert b.release(2, 2)
    assert b.gt_last() == 2
    stage_step(b, 2, tmp_path, {1: ["d"]})  # a replay after a rollback stages it again
    assert not b.release(2, 2)
    assert released(kafka_bootstrap, topic) == [("a", 1, b"a"), ("b", 1, b"b"), ("c", 1, b"c"), ("d", 2, b"d")]
    stage_step(b, 1, tmp_path, {0: ["a"]})  # a rollback's replay of a released step: staged, never released
    stage_step(b, 3, tmp_path, {0: ["e"]})
    assert b.release(3, 2)
    assert not redis_client.hkeys(b._staging), "what was released or will never be is not kept"


def test_a_release_cut_off_before_its_commit_is_aborted_and_done_again_by_the_next_worker(
        kafka_bootstrap: str, topic: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    spec = pipeline(kafka_bootstrap, topic)
    first, second = barrier(spec, redis_client), barrier(spec, redis_client)
    stage_step(first, 1, tmp_path, {0: ["a"], 1: ["b"]})
    # the first worker writes channel 0's records into a transaction and dies before the commit
    state = first._channel(0)
    state.begin(1, first._staged(1, 0), ("user",))
    state.producer.flush(30)
    # another worker releases: its producer's init aborts the open transaction
    assert second.release(1, 2)
    assert released(kafka_bootstrap, topic) == [("a", 1, b"a"), ("b", 1, b"b")]


def test_a_worker_releasing_again_after_another_did_reads_the_released_step_afresh(
        kafka_bootstrap: str, topic: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    """A producer remembers the GT_last of its own commit; the coordinator's releases move between workers
    (the first that answers), and the one that released in between fenced it: no step twice, none lost."""
    spec = pipeline(kafka_bootstrap, topic)
    one, other = barrier(spec, redis_client), barrier(spec, redis_client)
    stage_step(one, 1, tmp_path, {0: ["a"], 1: ["b"]})
    assert one.release(1, 2)
    assert one._channel(0).released() == (1, False)  # known from its own commit: not read
    stage_step(other, 2, tmp_path, {0: ["c"]})
    assert other.release(2, 2)
    stage_step(one, 3, tmp_path, {1: ["d"]})
    assert one.release(3, 2)  # fenced on its remembered step 1: a new producer reads 2, and releases 3
    assert not other.release(3, 2) and not one.release(2, 2)
    assert released(kafka_bootstrap, topic) == [("a", 1, b"a"), ("b", 1, b"b"), ("c", 2, b"c"), ("d", 3, b"d")]


class _Misled:
    """A producer whose broker answers one commit as done and then keeps the group's offset where it was
    (seen after a broker killed mid-commit came back: ``barrier/kafka.py``): the offset is lost once, and
    with ``records`` False the records too (aborted, answered as committed)."""

    def __init__(self, inner: Any, records: bool) -> None:
        self.inner, self.records, self.times = inner, records, 1

    def send_offsets_to_transaction(self, *args: Any) -> None:
        if not self.times:
            self.inner.send_offsets_to_transaction(*args)

    def commit_transaction(self, *args: Any) -> None:
        if self.times:
            self.times -= 1
            if not self.records:
                self.inner.abort_transaction(*args)
                return
        self.inner.commit_transaction(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("records", [True, False], ids=["records-in", "records-lost"])
def test_a_commit_answered_as_done_that_did_not_move_the_released_step_is_finished_once(
        kafka_bootstrap: str, topic: str, redis_client: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, records: bool) -> None:
    """A slow commit's GT_last is read again; when it did not move, the step is finished: the offset alone when
    its records are in, else the records again. Each record once, the released step moved, and a release by
    another worker afterwards takes the step as done."""
    monkeypatch.setattr(kafka_barrier, "COMMIT_CHECK_S", -1.0)  # every commit counts as slow
    spec = pipeline(kafka_bootstrap, topic)
    b, other = barrier(spec, redis_client), barrier(spec, redis_client)
    stage_step(b, 1, tmp_path, {0: ["a"], 1: ["b"]})
    assert b.release(1, 2)
    stage_step(b, 2, tmp_path, {0: ["c", "d"], 1: ["e"]})
    state = b._channel(0)
    state._producer = _Misled(state.producer, records)  # type: ignore[assignment]
    assert b.release(2, 2)
    assert barrier(spec, redis_client).gt_last() == 2
    assert not other.release(2, 2)
    stage_step(other, 3, tmp_path, {0: ["f"]})
    assert other.release(3, 2)
    assert released(kafka_bootstrap, topic) == [("a", 1, b"a"), ("b", 1, b"b"), ("c", 2, b"c"), ("d", 2, b"d"),
                                                ("e", 2, b"e"), ("f", 3, b"f")]
    assert not redis_client.hkeys(b._in), "the mark of records in goes with the step's release"


def test_a_records_in_mark_keeps_another_worker_from_writing_them_again(
        kafka_bootstrap: str, topic: str, redis_client: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker that found a step's records in but its GT_last not moved dies before it commits the offset
    alone: the next worker's release commits the offset alone too, not the records again."""
    monkeypatch.setattr(kafka_barrier, "COMMIT_CHECK_S", -1.0)
    spec = pipeline(kafka_bootstrap, topic)
    dying, survivor = barrier(spec, redis_client), barrier(spec, redis_client)
    stage_step(dying, 1, tmp_path, {0: ["a"], 1: ["b"]})
    state = dying._channel(0)
    state._producer = _Misled(state.producer, True)  # type: ignore[assignment]

    def dies(*args: Any, **kwargs: Any) -> None:
        raise SystemExit("killed")  # after marking its records in, before the offset alone

    monkeypatch.setattr(kafka_barrier._Channel, "visible", lambda self: True)
    with monkeypatch.context() as m:
        m.setattr(kafka_barrier.log, "warning", dies)
        with pytest.raises(SystemExit):
            dying.release_channel(1, 0)
    assert redis_client.hkeys(dying._in) == [b"1:0"]
    assert survivor.release(1, 2)
    assert survivor.gt_last() == 1
    assert released(kafka_bootstrap, topic) == [("a", 1, b"a"), ("b", 1, b"b")]


def test_a_zombie_workers_late_commit_is_fenced_by_kafka(
        kafka_bootstrap: str, topic: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    spec = pipeline(kafka_bootstrap, topic)
    zombie, survivor = barrier(spec, redis_client), barrier(spec, redis_client)
    stage_step(zombie, 1, tmp_path, {0: ["a"], 1: ["b"]})
    state = zombie._channel(0)
    state.begin(1, zombie._staged(1, 0), ("user",))  # paused here (SIGSTOP, a partition) ...
    assert survivor.release(1, 2)                      # ... while the run moved on without it
    with pytest.raises(KafkaException) as fenced:      # ... and wakes up to commit
        state.commit()
    assert fenced.value.args[0].fatal()
    stage_step(survivor, 2, tmp_path, {0: ["c"]})
    with pytest.raises(KafkaReleaseError):            # any later release by the zombie fails too
        zombie.release(2, 2)
    assert survivor.release(2, 2)
    assert released(kafka_bootstrap, topic) == [("a", 1, b"a"), ("b", 1, b"b"), ("c", 2, b"c")]


def test_a_fresh_run_over_a_topic_this_pipeline_wrote_fails_or_starts_over_as_asked(
        kafka_bootstrap: str, topic: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    spec = pipeline(kafka_bootstrap, topic)
    b = barrier(spec, redis_client)
    stage_step(b, 1, tmp_path, {0: ["a"]})
    b.release(1, 2)
    [problem] = prepare_outputs(spec, tmp_path / "dead")
    assert problem.field == "spec.stages[1].sink.existingOutput" and problem.gt_last == 1
    assert f"topic {topic!r} already holds output (steps up to 1)" in str(problem)
    assert barrier(spec, redis_client).gt_last() == 1  # refused: nothing changed
    assert prepare_outputs(dataclasses.replace(spec, stages=tuple(
        dataclasses.replace(s, kafka_sink=dataclasses.replace(s.kafka_sink, existing="resume")) if s.kafka_sink else s
        for s in spec.stages)), tmp_path / "dead") == []
    assert barrier(spec, redis_client).gt_last() == 1
    overwrite = pipeline(kafka_bootstrap, topic, existing="overwrite")
    overwrite = dataclasses.replace(overwrite, identity=spec.identity)
    assert prepare_outputs(overwrite, tmp_path / "dead") == []
    assert barrier(spec, redis_client).gt_last() == 0
    missing = pipeline(kafka_bootstrap, f"{topic}-missing")
    [problem] = prepare_outputs(missing, tmp_path / "dead")
    assert problem.field == "spec.stages[1].sink.kafka.topic" and "does not exist" in str(problem)


def late_pipeline(bootstrap: str, topic: str, parallelism: int, sink: str = "fail") -> PipelineSpec:
    text = f"""
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {{name: kl}}
spec:
  entryPoint: m.py
  workers: 1
  kafka: {{bootstrapServers: "{bootstrap}"}}
  stages:
    - name: src
      parallelism: 1
      source: {{generator: {{function: g, rowsPerStep: 10}}, eventTime: {{column: ts}}}}
    - name: per-minute
      parallelism: {parallelism}
      inputs: [{{stage: src}}]
      aggregate:
        keyBy: [user]
        window: {{tumbling: {{size: 1m}}, timeColumn: ts, lateData: {{topic: {topic}}}}}
        aggregations: [{{name: n, op: count}}]
    - name: out
      parallelism: 1
      inputs: [{{stage: per-minute, partition: hash, keys: [user]}}]
      sink: {{parquet: {{path: /tmp/kl-out}}, existingOutput: {sink}}}
"""
    spec = parse_pipeline(text, Path("/tmp"), check_entry_point=False)
    return dataclasses.replace(spec, identity=f"kl-{uuid.uuid4().hex[:8]}")


def stage_late(b: LateTopicBarrier, step: int, tmp: Path, rows: dict[int, list[str]]) -> None:
    """What the sidecars do: a part for each channel that found late records."""
    for channel, users in rows.items():
        path = tmp / f"late-{step}-{channel}.arrow"
        table = pa.table({"user": users, "late_reason": ["window closed"] * len(users)})
        write_part(path, iter([table]), table.schema)
        b.stage(step, channel, path)


def test_late_records_of_every_channel_are_released_in_one_transaction_per_step(
        kafka_bootstrap: str, topic: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    spec = late_pipeline(kafka_bootstrap, topic, 2)
    store = RunStore(redis_client, spec.store_key)
    b = LateTopicBarrier(spec.stage("per-minute"), spec, store)
    stage_late(b, 1, tmp_path, {0: ["a"], 1: ["b", "c"]})
    assert b.release(1, 1) and b.gt_last() == 1
    assert b.release(2, 1)  # no channel found late records: the step moves all the same
    stage_late(b, 3, tmp_path, {1: ["d"]})
    # a rollback and a rescale to 3 channels: step 3 is run again, its late records found by other channels;
    # the part the 2-channel run staged is left behind and must not be released
    rescaled = LateTopicBarrier(dataclasses.replace(spec.stage("per-minute"), parallelism=3), spec, store)
    stage_late(rescaled, 3, tmp_path, {2: ["d"]})
    assert rescaled.release(3, 1)
    assert not b.release(3, 1), "a step released once is not released again"
    assert released(kafka_bootstrap, topic) == [("a", 1, b"a"), ("b", 1, b"b"), ("c", 1, b"c"), ("d", 3, b"d")]
    assert not redis_client.hkeys(b._staging)


def test_a_fresh_run_needs_the_late_topic_and_starts_its_released_steps_afresh(
        kafka_bootstrap: str, topic: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    missing = late_pipeline(kafka_bootstrap, f"{topic}-absent", 2)
    [problem] = prepare_outputs(missing, tmp_path / "dead")
    assert problem.field == "spec.stages[1].aggregate.window.lateData.topic" and "does not exist" in str(problem)
    spec = late_pipeline(kafka_bootstrap, topic, 2)
    b = LateTopicBarrier(spec.stage("per-minute"), spec, RunStore(redis_client, spec.store_key))
    assert b.release(1, 1) and b.gt_last() == 1
    resumed = late_pipeline(kafka_bootstrap, topic, 2, sink="resume")
    assert prepare_outputs(dataclasses.replace(resumed, identity=spec.identity), tmp_path / "dead") == []
    assert b.gt_last() == 1, "a run that resumes its sinks keeps the late records' released steps"
    assert prepare_outputs(spec, tmp_path / "dead") == []
    b.close()
    assert b.gt_last() == 0, "a fresh run would otherwise drop its first late records"
