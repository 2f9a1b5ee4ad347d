"""The lineage tables in Redis: CT, NOT, PT, NTT, LT, and the PT delete lock.

Layout (every key starts with ``ftp:{<pipeline>}:``; the braces keep a
pipeline's keys in one Redis Cluster slot)::

    ct              hash  edge key -> interval set of consumed seqs (cemetery)
    not:<worker>    set   object names held in that worker's buffer
    gc:<worker>     set   its objects buried since its last collection (what the next one walks)
    pt              hash  object name -> worker holding it
    ntt:<worker>    set   task json: tasks that worker must run
    lt              hash  object name -> producer task json (lineage)
    rows            hash  object name -> row count (accounting)
    digest          hash  object name -> its rows' digest, a keyed function's (``determinism.py``)
    state           hash  stateful channel -> last step folded into its state
    placement       hash  channel -> worker
    alive           set   workers that may record completions (fencing)
    run             str   the current run's token: a worker of another run may record nothing
    epoch           int   recovery epoch
    lock:pt         str   PT delete lock, held exclusively by the coordinator
    dead            hash  stage.channel@step -> dead-letter records of that task (counted once)

Every multi-key change is one Lua script (``lua/``), so a worker killed at any
instant leaves the tables either before or after a change, never between.

The PT delete lock. The seed's lock is shared by workers collecting garbage
and exclusive for the coordinator while it plans recovery. Here a worker's
whole collection (check the cemetery, drop from PT and NOT) is *one* script
that first checks the lock key, so "shared mode" needs no registration: a
collection either completed before the coordinator took the lock — and the
snapshot sees its effect — or is refused. Deleting the files afterwards is
local and invisible to planning. The exclusive holder sets the key with a
time-to-live, so a coordinator that dies mid-recovery does not stop GC forever.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, cast

import redis

from ftpipeline.lineage.cemetery import IntervalSet
from ftpipeline.lineage.naming import STORAGE_NODE, Channel, Task, WorkerId
from ftpipeline.lineage.planner import RecoveryPlan, TablesView


def _script(name: str) -> str:
    lua = resources.files("ftpipeline.lineage") / "lua"
    return "\n".join((lua / f"{part}.lua").read_text() for part in ("intervals", "gc_marks", name))


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Completion:
    """What a worker reports when a task finishes (see ``complete_task.lua``)."""

    task: Task
    outputs: Sequence[tuple[str, int]]  # (object name, rows)
    consumed: Sequence[str]             # inputs to put in the cemetery
    state_step: int | None              # stateful channels: step now folded in
    event: Mapping[str, Any]
    stats: Mapping[str, int]
    clock: str = ""                     # vector clock stamped on the outputs (checkpoint.clock)
    dead_letters: int = 0               # malformed records the task sent to the dead-letter output
    digests: Mapping[str, str] = field(default_factory=dict)  # object -> rows' digest (determinism.py)


class LockBusy(RuntimeError):
    pass


class LineageTables:
    def __init__(self, client: redis.Redis, pipeline: str) -> None:
        self.r = client
        self.prefix = f"ftp:{{{pipeline}}}:"
        self.run = ""  # on a worker: the run token it was admitted with (``adopt``); "" on the coordinator
        self._complete = client.register_script(_script("complete_task"))
        self._apply = client.register_script(_script("apply_plan"))
        self._collect = client.register_script(_script("collect"))
        self._ct_update = client.register_script(_script("ct_update"))
        self._bury_range = client.register_script(_script("ct_bury_range"))

    def k(self, name: str) -> str:
        return self.prefix + name

    # --- membership --------------------------------------------------------
    def begin_run(self, token: str, members: Iterable[WorkerId] = ()) -> None:
        """The coordinator of a run claims the tables: from now on only workers holding ``token``
        (``coordinator/admission.py``) may record completions or write sinks, whatever their id;
        ``members`` (workers taken over, holding it already) are admitted in the same transaction."""
        pipe = self.r.pipeline(transaction=True)
        pipe.set(self.k("run"), token)
        for worker in members:
            pipe.sadd(self.k("alive"), worker)
        pipe.execute()

    def admit(self, worker: WorkerId) -> None:
        self.r.sadd(self.k("alive"), worker)

    def expel(self, worker: WorkerId) -> None:
        """Take back an admission that did not complete (the worker stopped answering meanwhile)."""
        self.r.srem(self.k("alive"), worker)

    def is_member(self, worker: WorkerId) -> bool:
        """In ``alive``, and (on a worker that adopted a run's token: ``run``) of the current run."""
        pipe = self.r.pipeline(transaction=False)
        pipe.sismember(self.k("alive"), worker)
        pipe.get(self.k("run"))
        member, run = pipe.execute()
        return bool(member) and (not self.run or (run is not None and _s(run) == self.run))

    def alive(self) -> set[WorkerId]:
        return {WorkerId(_s(w)) for w in self.r.smembers(self.k("alive"))}

    # --- scheduling --------------------------------------------------------
    def assign(self, tasks: Iterable[tuple[WorkerId, Task]]) -> None:
        pipe = self.r.pipeline(transaction=True)
        for worker, task in tasks:
            pipe.sadd(self.k(f"ntt:{worker}"), task.to_json())
        pipe.execute()

    def tasks_of(self, worker: WorkerId) -> list[Task]:
        return [Task.from_json(t) for t in self.r.smembers(self.k(f"ntt:{worker}"))]

    def set_placement(self, placement: Mapping[Channel, WorkerId]) -> None:
        if placement:
            self.r.hset(self.k("placement"), mapping={ch.key(): w for ch, w in placement.items()})

    def placement(self) -> dict[Channel, WorkerId]:
        raw = self.r.hgetall(self.k("placement"))
        return {Channel.parse(_s(c)): WorkerId(_s(w)) for c, w in raw.items()}

    # --- workers' updates --------------------------------------------------
    def complete(self, worker: WorkerId, done: Completion, lineage: bool = True) -> int:
        ch = done.task.ref.key() if done.state_step is not None else ""
        keys = [
            self.k(f"ntt:{worker}"), self.k(f"not:{worker}"), self.k("pt"), self.k("lt"),
            self.k("rows"), self.k("ct"), self.k("state"), self.k("inbox"), self.k("alive"), self.k("stats"),
            self.k("meta"), self.k("dead"), self.k("run"),
            self.k(f"done:{worker}"), self.k("digest"),
        ]
        args: list[str | int] = [
            worker,
            done.task.to_json(),
            json.dumps([list(o) for o in done.outputs]),
            json.dumps(list(done.consumed)),
            ch,
            done.state_step if done.state_step is not None else 0,
            "1" if lineage else "0",
            json.dumps(dict(done.event)),
            json.dumps(dict(done.stats)) if done.stats else "{}",
            done.clock,
            f"{done.task.ref.key()}@{done.task.step}",
            done.dead_letters,
            self.run,
            json.dumps(dict(done.digests)) if done.digests else "",
        ]
        return int(self._complete(keys=keys, args=args))

    @property
    def ready_channel(self) -> str:
        """The pub/sub channel a completion that produced objects is announced on (``announce``); under the
        pipeline's prefix like its keys, so one pattern covers both for whoever scopes access per pipeline."""
        return self.k("ready")

    def announce(self, worker: WorkerId) -> None:
        """Tell every worker that new objects exist: a task waiting for them may be ready now."""
        self.r.publish(self.ready_channel, worker)

    def clocks(self, names: Sequence[str]) -> list[str | None]:
        """The vector clocks stamped on objects (None where none was recorded)."""
        if not names:
            return []
        return [_s(c) if c is not None else None for c in self.r.hmget(self.k("meta"), list(names))]

    def locate(self, names: Sequence[str]) -> list[WorkerId | None]:
        if not names:
            return []
        found = self.r.hmget(self.k("pt"), list(names))
        return [WorkerId(_s(w)) if w is not None else None for w in found]

    def collect(self, worker: WorkerId) -> list[str] | None:
        """Drop this worker's consumed objects from PT/NOT; None if recovery holds the lock."""
        keys = [self.k("pt"), self.k(f"not:{worker}"), self.k("ct"), self.k("lock:pt"), self.k(f"gc:{worker}")]
        dropped = self._collect(keys=keys, args=[worker])
        if dropped is None:
            return None
        return [_s(n) for n in dropped]

    def bury(self, names: Sequence[str]) -> None:
        if names:
            self._ct_update(keys=[self.k("ct"), self.k("pt")], args=["add", *names])

    def resurrect(self, names: Sequence[str]) -> None:
        if names:
            self._ct_update(keys=[self.k("ct"), self.k("pt")], args=["remove", *names])

    def bury_range(self, edges: Sequence[str], first: int, last: int, held_from: int = 1) -> None:
        """Put steps ``first..last`` of each edge in the cemetery (a checkpoint covers them). Objects of
        steps from ``held_from`` on may still be held: they become their holders' collection candidates
        (before it, an earlier checkpoint covered them, so a range costs the steps since that one)."""
        if edges and last >= first:
            self._bury_range(keys=[self.k("ct"), self.k("pt")], args=[first, last, held_from, *edges])

    def trim(self, floor: int) -> int:
        """Forget lineage, row counts, clocks and digests of objects of steps <= ``floor``.

        After a committed checkpoint every such object is folded into a snapshot
        or released by the barrier: no plan can need it again.
        """
        dropped = 0
        for name in ("lt", "rows", "meta", "digest"):
            key = self.k(name)
            batch: list[str] = []
            for entry, _ in self.r.hscan_iter(key, count=1000):
                obj = _s(entry)
                if int(obj.split(".")[2]) <= floor:
                    batch.append(obj)
                if len(batch) >= 500:
                    dropped += int(self.r.hdel(key, *batch))
                    batch = []
            if batch:
                dropped += int(self.r.hdel(key, *batch))
        return dropped

    def reset_for_restore(self, workers: Sequence[WorkerId], held_by_storage: Mapping[str, int], epoch: int) -> None:
        """Every worker reopens a checkpoint: the lineage of the run so far is void.

        Objects saved with the checkpoint (in flight across its cut) are held by
        checkpoint storage, which acts as a node (Quokka: persistent storage is a node).
        """
        pipe = self.r.pipeline(transaction=True)
        for key in self.r.scan_iter(match=f"{self.prefix}ntt:*", count=1000):
            pipe.delete(key)
        for pattern in ("not:*", "gc:*", "done:*"):
            for key in self.r.scan_iter(match=f"{self.prefix}{pattern}", count=1000):
                pipe.delete(key)
        for name in ("pt", "ct", "lt", "rows", "meta", "digest", "state", "alive"):
            pipe.delete(self.k(name))
        if held_by_storage:
            pipe.hset(self.k("pt"), mapping=cast(Any, dict.fromkeys(held_by_storage, STORAGE_NODE)))
            pipe.hset(self.k("rows"), mapping=cast(Any, dict(held_by_storage)))
        if workers:
            pipe.sadd(self.k("alive"), *workers)
        pipe.set(self.k("epoch"), epoch)
        pipe.execute()

    def cemetery(self) -> dict[str, IntervalSet]:
        return {_s(k): IntervalSet.decode(v) for k, v in self.r.hgetall(self.k("ct")).items()}

    # --- the coordinator's side --------------------------------------------
    def lock_exclusive(self, owner: str, ttl_ms: int = 30_000, wait_s: float = 10.0) -> None:
        deadline = time.monotonic() + wait_s
        while not self.r.set(self.k("lock:pt"), owner, nx=True, px=ttl_ms):
            if _s(self.r.get(self.k("lock:pt")) or b"") == owner:
                self.r.pexpire(self.k("lock:pt"), ttl_ms)
                return
            if time.monotonic() > deadline:
                raise LockBusy("PT delete lock is held by another coordinator")
            time.sleep(0.01)

    def unlock_exclusive(self, owner: str) -> None:
        key = self.k("lock:pt")
        if _s(self.r.get(key) or b"") == owner:
            self.r.delete(key)

    def snapshot(self, workers: Iterable[WorkerId]) -> TablesView:
        """All tables in one MULTI/EXEC: a consistent view for planning."""
        workers = sorted(set(workers))
        pipe = self.r.pipeline(transaction=True)
        for w in workers:
            pipe.smembers(self.k(f"ntt:{w}"))
            pipe.smembers(self.k(f"not:{w}"))
        for name in ("pt", "ct", "lt", "rows", "placement", "state"):
            pipe.hgetall(self.k(name))
        res = pipe.execute()
        ntt = {w: frozenset(Task.from_json(t) for t in res[2 * i]) for i, w in enumerate(workers)}
        not_ = {w: frozenset(_s(n) for n in res[2 * i + 1]) for i, w in enumerate(workers)}
        pt, ct, lt, rows, placement, state = res[2 * len(workers):]
        return TablesView(
            ntt=ntt,
            not_=not_,
            pt={_s(k): WorkerId(_s(v)) for k, v in pt.items()},
            ct={_s(k): IntervalSet.decode(v) for k, v in ct.items()},
            lt={_s(k): Task.from_json(v) for k, v in lt.items()},
            rows={_s(k): int(v) for k, v in rows.items()},
            placement={Channel.parse(_s(k)): WorkerId(_s(v)) for k, v in placement.items()},
            state_steps={Channel.parse(_s(k)): int(v) for k, v in state.items()},
        )

    def apply(self, plan: RecoveryPlan) -> None:
        keys = [
            self.k("pt"), self.k("ct"), self.k("placement"), self.k("alive"), self.k("epoch"),
            self.k(f"ntt:{plan.dead}"), self.k(f"not:{plan.dead}"), self.k(f"gc:{plan.dead}"),
        ]
        args: list[str | int] = [
            self.prefix,
            plan.dead,
            plan.epoch,
            json.dumps([[w, t.to_json()] for w, t in plan.tasks]),
            json.dumps(sorted(plan.resurrect)),
            json.dumps({ch.key(): w for ch, w in plan.moves.items()}),
        ]
        self._apply(keys=keys, args=args)

    def epoch(self) -> int:
        return int(self.r.get(self.k("epoch")) or 0)

    def clear(self) -> int:
        """Delete every key of this pipeline (a fresh run, or the operator's finalizer).

        The members go first, with the run's token, in one step: the keys go one by one after them, and a
        completion arriving meanwhile (a worker of the run being taken over, finishing a task) must find no
        member at all and be dropped, not find members but no token and be refused as a zombie's, which
        stops the worker the resumed run was about to keep."""
        n = int(self.r.delete(self.k("alive"), self.k("run")))
        for key in self.r.scan_iter(match=f"{self.prefix}*", count=1000):
            n += int(self.r.delete(key))
        return n
