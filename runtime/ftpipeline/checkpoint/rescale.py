"""A checkpoint reopened under a spec whose stateful stages have another parallelism: state re-partitioned.

Why: changing a running aggregate's parallelism (an upgrade on Kubernetes,
``--resume`` with an edited file) must keep its state. A checkpoint holds
one snapshot per channel of the parallelism it was taken with; after the
change, channel c of n must hold exactly the keys its hash edge now sends
it, ``pmod(hash(keys), n) == c`` (``dataflow/partition.py``). So each new
channel is restored from every old snapshot of its stage, keeping its own
keys (``worker/executor.py``): Flink's redistribution of key groups, with
one group per key.

The manifest in storage is not rewritten. :func:`reshape` gives the
coordinator a view of it under the current graph, in which a re-partitioned
channel's snapshot path names the old snapshots and the new parallelism
(:func:`rescaled_path`); that path travels where any snapshot path does
(reopening, a lost channel's rebuild), and every restore decodes it the
same way, until the next checkpoint writes the new channels' own snapshots.

What cannot be re-partitioned is refused before anything runs, naming the
field (a :class:`~ftpipeline.spec.load.SpecError`):

- a source stage's parallelism: its slots' offsets are in the step log,
  and a replayed step must read the same records in the same channels;
- a cut whose old channels of a stage reflect different steps (a pipelined
  checkpoint): their rows cannot be merged into one step;
- a Kafka sink's parallelism: its transactions and released steps are kept
  per channel.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ftpipeline.lineage.naming import Channel
from ftpipeline.spec.load import Problem, SpecError
from ftpipeline.spec.model import Partition, PipelineSpec, StageSpec

PREFIX = "rescaled:"


@dataclass(frozen=True)
class Rescaled:
    parallelism: int          # the stage's parallelism now
    keys: tuple[str, ...]     # the columns its input edges hash, in their order
    sources: tuple[str, ...]  # the old channels' snapshot paths ("" for an empty one is left out)


def rescaled_path(parallelism: int, keys: tuple[str, ...], sources: list[str]) -> str:
    return PREFIX + json.dumps({"parallelism": parallelism, "keys": list(keys), "from": [s for s in sources if s]})


def parse(path: str) -> Rescaled | None:
    """The old snapshots a re-partitioned channel is restored from; None for a plain snapshot path."""
    if not path.startswith(PREFIX):
        return None
    doc = json.loads(path[len(PREFIX):])
    return Rescaled(int(doc["parallelism"]), tuple(doc["keys"]), tuple(doc["from"]))


def _channels(keys: Any) -> dict[str, set[int]]:
    """Channel keys (``stage.index``) grouped by stage."""
    out: dict[str, set[int]] = {}
    for key in keys:
        ch = Channel.parse(key)
        out.setdefault(ch.stage, set()).add(ch.index)
    return out


def _field(spec: PipelineSpec, stage: str) -> str:
    index = [s.name for s in spec.stages].index(stage)
    return f"spec.stages[{index}].parallelism"


def reshape(manifest: Mapping[str, Any], spec: PipelineSpec) -> dict[str, Any]:
    """``manifest`` as ``spec``'s stages read it: unchanged when no stage's parallelism changed. A change that
    cannot be re-partitioned is a SpecError naming each field."""
    stages: dict[str, StageSpec] = {s.name: s for s in spec.stages}
    out = copy.deepcopy(dict(manifest))
    states: dict[str, dict[str, Any]] = out.get("states") or {}
    problems: list[Problem] = []
    for stage, slots in _channels(out.get("offsets") or {}).items():
        s = stages.get(stage)
        if s is not None and s.kafka is None and slots != set(range(s.parallelism)):
            problems.append(Problem(_field(spec, stage), f"the checkpoint's {stage} has {len(slots)} channels, the "
                                    f"spec {s.parallelism}: a source's parallelism cannot change from a "
                                    "checkpoint (its records are recorded per channel)"))
    for stage, old_p in (out.get("parallelism") or {}).items():
        s = stages.get(stage)
        if s is not None and s.kafka_sink is not None and s.parallelism != int(old_p):
            problems.append(Problem(_field(spec, stage), f"{stage} writes Kafka transactions per channel: its "
                                    f"parallelism cannot change from {old_p} to {s.parallelism}"))
    by_stage: dict[str, dict[int, dict[str, Any]]] = {}
    for key, snap in states.items():
        ch = Channel.parse(key)
        by_stage.setdefault(ch.stage, {})[ch.index] = snap
    for stage, old in by_stage.items():
        if stage not in stages or not stages[stage].keeps_state:
            continue
        n = stages[stage].parallelism
        if set(old) == set(range(n)):
            continue
        # an empty snapshot (a channel no key reached) has no rows to merge, whatever step it names
        steps = {int(s["step"]) for s in old.values() if s.get("path")} or {max(int(s["step"]) for s in old.values())}
        inflight = [name for name in (out.get("inflight") or {}) if name.split(".")[3:4] == [stage]]
        if len(steps) != 1 or inflight:
            problems.append(Problem(_field(spec, stage), f"the checkpoint's {stage} channels reflect steps "
                                    f"{sorted(steps)} (a pipelined cut): take a checkpoint in lockstep to change "
                                    "its parallelism"))
            continue
        hashed = {e.keys for e in stages[stage].inputs if e.partition is Partition.HASH}
        if len(hashed) != 1 or any(e.partition is not Partition.HASH for e in stages[stage].inputs):
            problems.append(Problem(_field(spec, stage), f"{stage}'s inputs are not all hashed on the same keys: "
                                    "its state cannot be re-partitioned the way its rows arrive"))
            continue
        [step], [keys] = steps, hashed
        path = rescaled_path(n, keys, [str(old[i]["path"]) for i in sorted(old)])
        for i in old:
            del states[Channel(stage, i).key()]
        for i in range(n):
            key = Channel(stage, i).key()
            states[key] = {"channel": key, "step": step, "path": path, "rows": 0, "bytes": 0}
    if problems:
        raise SpecError(f"{spec.name}, resumed from checkpoint {out['epoch']}", problems)
    return out


def changed_stages(manifest: Mapping[str, Any], spec: PipelineSpec) -> list[str]:
    """Stateful stages whose channels differ between ``manifest`` and ``spec`` (what :func:`reshape` moves)."""
    p = {s.name: s.parallelism for s in spec.stages}
    return sorted(s for s, idx in _channels(manifest.get("states") or {}).items()
                  if s in p and idx != set(range(p[s])))
