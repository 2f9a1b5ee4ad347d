"""What a fresh run does with output an earlier run left in its sinks: one rule for every path.

A fresh run (not a resume) over a sink directory that already holds
``step=N`` directories would otherwise keep the old steps and drop its own
first N (the barrier drops what is at or below ``GT_last``): output from two
runs, silently. Each sink says what it wants in
``spec.stages[i].sink.existingOutput``:

    fail      (default) nothing is touched; the run fails naming the field and the path
    overwrite the old steps go (and the pipeline's dead letters and late records with them); a Kafka
              topic keeps its records, the pipeline's record of released steps goes
    resume    the old steps stay; the barrier drops the steps it already holds

A Kafka sink's topic must exist: a fresh run fails naming the field when it
does not (the broker does not create topics on a producer's first write).
A late-data topic (``late.py``) too; a fresh run forgets its released
steps unless a sink resumes. A Delta table may hold rows of other
writers: only this pipeline's steps (its transaction version) count as
output already there, and ``overwrite`` removes the table (Delta never
lets a transaction version go back).

``ftpipeline run --overwrite`` sets every sink to ``overwrite``. The CLI
applies this rule before it starts any worker; on both paths the
coordinator has a worker apply it again once the workers joined (the
operator never mounts pipeline storage), which finds nothing left to do
where the CLI already did it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from ftpipeline.barrier.bundles import ParquetBundleSink
from ftpipeline.barrier.objects import ObjectBundleSink
from ftpipeline.objectstore.base import is_remote, open_store
from ftpipeline.barrier.delta import DeltaBarrier
from ftpipeline.barrier.kafka import KafkaBarrier, KafkaReleaseError
from ftpipeline.barrier.late import LateTopicBarrier
from ftpipeline.control.history import history_store
from ftpipeline.spec.model import PipelineSpec


@dataclass(frozen=True)
class ExistingOutput:
    """A sink whose ``fail`` policy met output already there."""

    field: str
    path: str
    gt_last: int

    def __str__(self) -> str:
        if not self.field.endswith("existingOutput"):
            return f"{self.field}: {self.path}"
        return (f"{self.path} already holds output (steps up to {self.gt_last}) and {self.field} is fail: "
                f"set it to overwrite or resume, or choose another path")


def _late_topics(spec: PipelineSpec, problems: list[ExistingOutput]) -> list[KafkaBarrier]:
    """The barriers of the late-data topics (``late.py``); a topic that is not there is a problem."""
    out: list[KafkaBarrier] = []
    for i, stage in enumerate(spec.stages):
        if stage.late_topic is None:
            continue
        topic = LateTopicBarrier(stage, spec, None)
        try:
            missing = topic.problem()
            if missing is not None:
                problems.append(ExistingOutput(f"spec.stages[{i}].{stage.late_field}.topic", missing, 0))
            elif topic.newest():  # an earlier run's released steps (a new broker has none to forget)
                out.append(topic)
        except KafkaReleaseError as exc:
            problems.append(ExistingOutput("spec.kafka.bootstrapServers", str(exc), 0))
        finally:
            topic.close()
    return out


def prepare_outputs(spec: PipelineSpec, dead_letters: Path | str) -> list[ExistingOutput]:
    """Apply every sink's policy; the problems, if any. Nothing is removed when any sink fails."""
    problems: list[ExistingOutput] = []
    overwrite: list[ParquetBundleSink | ObjectBundleSink | KafkaBarrier | DeltaBarrier] = []
    stale: list[DeltaBarrier] = []
    for i, stage in enumerate(spec.stages):
        if stage.kafka_sink is not None:
            topic = KafkaBarrier(stage.name, stage.kafka_sink, stage.parallelism, spec, None)
            at = f"spec.stages[{i}].sink"
            missing = topic.problem()
            if missing is not None:
                problems.append(ExistingOutput(f"{at}.kafka.topic", missing, 0))
            elif stage.kafka_sink.existing == "overwrite":
                overwrite.append(topic)
            elif stage.kafka_sink.existing == "fail":
                try:
                    if newest := topic.newest():
                        problems.append(ExistingOutput(f"{at}.existingOutput", f"topic {stage.kafka_sink.topic!r}",
                                                       newest))
                except KafkaReleaseError as exc:
                    problems.append(ExistingOutput(f"{at}.kafka.bootstrapServers", str(exc), 0))
            topic.close()
            continue
        if stage.delta_sink is not None:
            table = DeltaBarrier(stage.name, stage.delta_sink, spec)
            if stage.delta_sink.existing == "overwrite":
                overwrite.append(table)
            elif stage.delta_sink.existing == "fail" and (newest := table.newest()):
                problems.append(ExistingOutput(f"spec.stages[{i}].sink.existingOutput",
                                               f"table {stage.delta_sink.path}", newest))
            else:  # parts a crashed run staged and never released: never visible, and not this run's
                stale.append(table)
            continue
        if stage.sink is None:
            continue
        path = stage.sink.path
        sink = ObjectBundleSink(str(path)) if is_remote(path) else ParquetBundleSink(Path(path))
        if stage.sink.existing == "overwrite":
            overwrite.append(sink)
        elif stage.sink.existing == "fail" and (sink.gt_last() or sink.has_staged()):
            problems.append(ExistingOutput(f"spec.stages[{i}].sink.existingOutput", str(stage.sink.path),
                                           sink.gt_last()))
    late = _late_topics(spec, problems)
    if problems:
        return problems
    if not any(getattr(s.sink or s.kafka_sink or s.delta_sink, "existing", "") == "resume" for s in spec.stages):
        overwrite += late
    for old in overwrite:
        old.reset()
    for table in stale:
        table.clear_staging()
    if overwrite:
        open_store(dead_letters).delete_prefix()
    history_store(spec).delete_prefix()  # the steps of a run before this one (control/history.py)
    for stage in spec.stages if overwrite else ():  # and the late records of its windows and deduplications
        if stage.late_data is not None:
            open_store(stage.late_data).delete_prefix(f"{stage.name}/")
    return []
