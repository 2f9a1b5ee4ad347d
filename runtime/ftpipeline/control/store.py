"""Run records in Redis that are not lineage: the step log, the inbox, the registry.

- **Step log** (``steps``): step S's source offsets are written here *before*
  step S is triggered, so any step can be replayed from exactly the same
  input (Feldera's input log, FlameStream's replay from a global time).
  ``offsets`` holds each source channel's next unread offset; ``committed`` the
  last committed step.
- **Inbox** (``inbox``): the workers' messages to the coordinator — Feldera's
  ``received(step, n)`` and ``replay(step)``, plus task completions (pushed by
  the completion script in the same atomic step as the lineage update),
  failures and joins. A list survives a coordinator restart: messages wait.
- **Registry** (``workers``): each worker's Flight address, written by its
  sidecar when it starts.
- **Stats** (``stats``): counters the workers increment (rows processed,
  rows re-processed by recovery tasks, dead letters), read for reports.
- **Generation** (``generation``): a token written when a run opens. A Redis
  without persistence that restarts comes back without it; the coordinator
  checks it and rebuilds (``coordinator/losses.py``) instead of trusting an
  empty store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from ftpipeline.lineage.naming import Channel, WorkerId


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class StepRecord:
    step: int
    offsets: dict[Channel, tuple[int, int]]
    reason: str
    watermark: int | None = None  # event time (us) the step runs with (``eventtime/``); None: none yet
    now: int | None = None        # its processing time (us since the epoch), when it was triggered: a keyed
                                  # function's clock (``operators/process.py``), the same in every replay
    tables: dict[str, int | str] = field(default_factory=dict)  # lookup stage -> its table's version
                                                                # (``dataflow/lookup.py``)

    def to_json(self) -> str:
        doc: dict[str, Any] = {"step": self.step, "reason": self.reason,
                               "offsets": {c.key(): list(o) for c, o in self.offsets.items()}}
        if self.watermark is not None:
            doc["watermark"] = self.watermark
        if self.now is not None:
            doc["now"] = self.now
        if self.tables:
            doc["tables"] = self.tables
        return json.dumps(doc)

    @classmethod
    def from_json(cls, text: str | bytes) -> StepRecord:
        doc = json.loads(text)
        return cls(doc["step"], {Channel.parse(c): (o[0], o[1]) for c, o in doc["offsets"].items()}, doc["reason"],
                   doc.get("watermark"), doc.get("now"), dict(doc.get("tables") or {}))


class RunStore:
    def __init__(self, client: redis.Redis, pipeline: str) -> None:
        self.r = client
        self.prefix = f"ftp:{{{pipeline}}}:"

    def k(self, name: str) -> str:
        return self.prefix + name

    # --- generation --------------------------------------------------------
    def mark_generation(self, token: str) -> None:
        self.r.set(self.k("generation"), token)

    def generation(self) -> str | None:
        raw = self.r.get(self.k("generation"))
        return _s(raw) if raw is not None else None

    # --- registry ----------------------------------------------------------
    def register(self, worker: WorkerId, info: Mapping[str, Any]) -> None:
        self.r.hset(self.k("workers"), worker, json.dumps(dict(info)))

    def workers(self) -> dict[WorkerId, dict[str, Any]]:
        return {WorkerId(_s(w)): json.loads(v) for w, v in self.r.hgetall(self.k("workers")).items()}

    def address(self, worker: WorkerId) -> str | None:
        raw = self.r.hget(self.k("workers"), worker)
        return json.loads(raw)["address"] if raw else None

    # --- inbox -------------------------------------------------------------
    def send(self, event: Mapping[str, Any]) -> None:
        self.r.rpush(self.k("inbox"), json.dumps(dict(event)))

    def receive(self, timeout_s: float, limit: int = 256) -> list[dict[str, Any]]:
        """Block up to ``timeout_s`` for one message, then take what else is queued."""
        first = self.r.blpop([self.k("inbox")], timeout=timeout_s)
        if first is None:
            return []
        out = [json.loads(first[1])]
        rest = self.r.lpop(self.k("inbox"), limit)
        if isinstance(rest, list):
            out.extend(json.loads(m) for m in rest)
        return out

    # --- step log ----------------------------------------------------------
    def record_step(self, record: StepRecord) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(self.k("steps"), str(record.step), record.to_json())
        for ch, (_, hi) in record.offsets.items():
            pipe.hset(self.k("offsets"), ch.key(), hi)
        pipe.execute()

    def step(self, step: int) -> StepRecord | None:
        raw = self.r.hget(self.k("steps"), str(step))
        return StepRecord.from_json(raw) if raw else None

    def watermarks(self, steps: range) -> dict[int, int | None]:
        """The recorded watermark of each of ``steps`` (one round trip; a step not recorded: None)."""
        if not steps:
            return {}
        raws = self.r.hmget(self.k("steps"), [str(s) for s in steps])
        return {s: (json.loads(raw).get("watermark") if raw else None) for s, raw in zip(steps, raws)}

    def times(self, steps: range) -> dict[int, int | None]:
        """The recorded processing time of each of ``steps`` (as :meth:`watermarks`)."""
        if not steps:
            return {}
        raws = self.r.hmget(self.k("steps"), [str(s) for s in steps])
        return {s: (json.loads(raw).get("now") if raw else None) for s, raw in zip(steps, raws)}

    def table_versions(self, steps: range) -> dict[int, dict[str, int | str]]:
        """The table versions each of ``steps`` recorded for the lookup stages (as :meth:`watermarks`)."""
        if not steps:
            return {}
        raws = self.r.hmget(self.k("steps"), [str(s) for s in steps])
        return {s: (json.loads(raw).get("tables") or {} if raw else {}) for s, raw in zip(steps, raws)}

    def next_offsets(self) -> dict[Channel, int]:
        return {Channel.parse(_s(c)): int(v) for c, v in self.r.hgetall(self.k("offsets")).items()}

    def set_offsets(self, offsets: Mapping[Channel, int]) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(self.k("offsets"))
        if offsets:
            pipe.hset(self.k("offsets"), mapping={c.key(): v for c, v in offsets.items()})
        pipe.execute()

    def trim_steps(self, floor: int) -> None:
        """Forget step records of steps <= ``floor`` (a committed checkpoint covers them)."""
        old = [k for k in self.r.hkeys(self.k("steps")) if int(k) <= floor]
        if old:
            self.r.hdel(self.k("steps"), *old)

    def commit(self, step: int) -> None:
        self.r.set(self.k("committed"), step)

    def committed(self) -> int:
        return int(self.r.get(self.k("committed")) or 0)

    # --- stats and history -------------------------------------------------
    def stats(self) -> dict[str, int]:
        return {_s(k): int(v) for k, v in self.r.hgetall(self.k("stats")).items()}

    def add_stats(self, increments: Mapping[str, int]) -> None:
        pipe = self.r.pipeline(transaction=True)
        for field, n in increments.items():
            pipe.hincrby(self.k("stats"), field, n)
        pipe.execute()

    def record_recovery(self, info: Mapping[str, Any]) -> None:
        self.r.rpush(self.k("recoveries"), json.dumps(dict(info)))

    def recoveries(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.r.lrange(self.k("recoveries"), 0, -1)]
