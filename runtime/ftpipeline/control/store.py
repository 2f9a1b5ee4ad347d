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
  Taken, not popped: a message moves to ``inbox:taken`` and leaves it only when
  the coordinator asks for the next ones (it has handled those). A pop whose
  reply was lost (Redis stopped, a connection cut after the server took it)
  would lose the message, a completion, and its step would never commit; taken,
  it is handed out again (messages are handled idempotently). So::

      inbox --take (the reply may be lost)--> inbox:taken --next receive: handled--> (gone)
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
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from ftpipeline.lineage.naming import Channel, WorkerId
from ftpipeline.lineage.stepclock import StepClock


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class StepRecord:
    step: int
    offsets: dict[Channel, tuple[int, int]]
    reason: str
    clock: StepClock = field(default_factory=StepClock)

    @property
    def watermark(self) -> int | None:
        return self.clock.watermark

    @property
    def now(self) -> int | None:
        return self.clock.now

    @property
    def tables(self) -> dict[str, int | str]:
        return dict(self.clock.tables)

    def to_json(self) -> str:
        return json.dumps({"step": self.step, "reason": self.reason,
                           "offsets": {c.key(): list(o) for c, o in self.offsets.items()}, **self.clock.to_json()})

    @classmethod
    def from_json(cls, text: str | bytes) -> StepRecord:
        doc = json.loads(text)
        return cls(doc["step"], {Channel.parse(c): (o[0], o[1]) for c, o in doc["offsets"].items()}, doc["reason"],
                   StepClock.from_json(doc))


# KEYS inbox, taken, batch; ARGV handled, token, limit. ``handled``: the token of the batch handed out last, now
# handled: ``taken`` is dropped if it still is that batch (a retried call, its first reply lost, finds another
# token and drops nothing). Then up to ``limit`` messages move from the inbox to ``taken``, which is returned
# whole (with what a lost reply did not hand out) as the batch ``token``.
_TAKE = """
if ARGV[1] ~= '' and redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
local more = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)
if #more > 0 then
  redis.call('LTRIM', KEYS[1], #more, -1)
  redis.call('RPUSH', KEYS[2], unpack(more))
end
local held = redis.call('LRANGE', KEYS[2], 0, -1)
if #held > 0 then redis.call('SET', KEYS[3], ARGV[2]) end
return held
"""


class RunStore:
    def __init__(self, client: redis.Redis, pipeline: str) -> None:
        self.r = client
        self.prefix = f"ftp:{{{pipeline}}}:"
        self._take = client.register_script(_TAKE)
        self._batch = ""  # the token of the messages this store handed out last (``inbox:taken``)

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
        """The messages queued (up to ``limit`` more than those taken before and not yet handed out), or
        else the first to come within ``timeout_s``. A call says the previous call's messages were handled."""
        keys = [self.k("inbox"), self.k("inbox:taken"), self.k("inbox:batch")]
        # what this store handed out last was handled (a first call's ``taken`` is another coordinator's: whether
        # it handled them is not known, so they are handed out again)
        token = uuid.uuid4().hex
        held = self._take(keys=keys, args=[self._batch, token, limit])
        wait: Any = timeout_s  # Redis takes a decimal number of seconds; the stub says int
        if not held and self.r.blmove(keys[0], keys[1], wait, "LEFT", "RIGHT") is not None:
            held = self._take(keys=keys, args=["", token, limit])
        self._batch = token if held else ""
        return [json.loads(m) for m in held]

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

    def clocks(self, steps: range) -> dict[int, StepClock]:
        """The recorded clock of each of ``steps`` (one round trip; a step not recorded: an empty clock)."""
        if not steps:
            return {}
        raws = self.r.hmget(self.k("steps"), [str(s) for s in steps])
        return {s: StepClock.from_json(json.loads(raw)) if raw else StepClock() for s, raw in zip(steps, raws)}

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
