"""Lineage recovery planning at scale: how long planning takes, and what Redis holds, at 1000 × 1000 channels.

Why: a lost worker is recovered by a plan made while the coordinator holds the
PT delete lock (``coordinator/losses.py``): no worker collects garbage until
the plan is applied, and no lost work restarts before it. The plan reads every
lineage table (``LineageTables.snapshot``), so its cost grows with channels
and with the steps kept since the last checkpoint. The project's target is a
planner that handles 1000 × 1000 channels in under a second. This measures
it on tables written the way a run writes them — every task assigned and
completed through the real Lua scripts, in a real private ``redis-server``
(``embedded/redis.py``) — then kills a worker and times the three phases of a
lineage recovery separately: (a) the snapshot of the tables, (b) the planner
(``plan_recovery``, a pure function), (c) applying the plan (``apply_plan.lua``).

What "1000 × 1000 channels" is here: 1000 source channels feeding 1000
stateful (aggregate) channels, one to one (forward: source channel i feeds
aggregate channel i), so 1000 objects per step cross that edge. A hash edge
of 1000 × 1000 would be a million objects per step, far past the spec's
MAX_OBJECTS_PER_STEP (65536), and one stage may have at most MAX_PARALLELISM
(512) channels; so the 1000 channels of each side are split into branches of
at most 512 (``src0 -> agg0``, ``src1 -> agg1``: 500 + 500 by default), an
aggregate takes its input forward (legal with equal parallelism), and every
aggregate feeds one Parquet sink (parallelism ``--sink-channels``, default 1,
hash on the key: 1000 more objects per step). 2001 channels in all, under
MAX_CHANNELS (2048); the spec is validated by the real loader
(``parse_pipeline``), so an illegal size is refused, not measured. No two
stages chain (an aggregate always heads a chain; the sink's edge is hash), so
lineage is kept on both edges. Channel i of every stage runs on worker
i mod W (``placement.initial_placement``).

History: ``--steps`` steps, each assigned as the coordinator does (one NTT
transaction) and completed task by task through ``complete_task.lua``, with
the outputs' vector clocks of a real ``EpochKeeper`` per worker, the inbox
drained as the coordinator drains it and every worker collecting garbage after
each step (``collect.lua``). The bench's default is the worst case: no checkpoint (a pipeline that turned them off),
so every aggregate keeps every input since step 1 unburied (stateful
consumers bury their inputs only when a checkpoint covers them) and LT keeps
every object's lineage. ``--checkpoint-every K`` commits a checkpoint every K
steps as ``coordinator/checkpoints.py`` does after a commit (``bury_range`` of
the aggregates' inputs, then ``trim``), so the tables stay bounded; a loss
right after a commit finds them almost empty, so ``--steps 1009`` with K = 10
is the worst case of that interval (9 steps kept). Then one more step is put
in flight — its sources done, aggregates and sink still pending — and the
worker holding the most stateful channels (ties: the most channels, then the
lowest id; ``--kill`` picks another) is lost.

Completions are queued on Redis pipelines (the registered scripts called with
a pipeline as client), one pipeline per stage and step, so the history of
2 M completions takes minutes, not the hours one round trip each would.

    python bench/lineage_scale.py                      # 1000 × 1000 channels, 1000 steps, 100 workers
    python bench/lineage_scale.py --small              # 100 × 100 channels, 100 steps, 10 workers
    python bench/lineage_scale.py --checkpoint-every 10 --steps 1009 --profile 20
    python bench/lineage_scale.py --channels 500 --steps 200 --workers 50 --json
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import math
import pstats
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis
from rich.console import Console
from rich.table import Table

from ftpipeline.checkpoint.clock import VectorClock
from ftpipeline.dataflow.graph import Graph
from ftpipeline.embedded.redis import EmbeddedRedis
from ftpipeline.lineage.naming import Channel, Task, TaskKind, WorkerId
from ftpipeline.lineage.placement import initial_placement
from ftpipeline.lineage.planner import RecoveryPlan, TablesView, plan_recovery
from ftpipeline.lineage.tables import Completion, LineageTables
from ftpipeline.spec.load import parse_pipeline
from ftpipeline.spec.schema import MAX_PARALLELISM
from ftpipeline.worker.epochs import EpochKeeper

NAME = "lineage-scale"
TARGET_S = 1.0  # the "done": the planner handles 1000 × 1000 channels in under 1 s
FULL = {"channels": 1000, "steps": 1000, "workers": 100}
SMALL = {"channels": 100, "steps": 100, "workers": 10}
# redis-py's default socket timeout (5 s) is shorter than Redis takes to build the snapshot's reply at full
# size without checkpoints (the whole MULTI/EXEC is answered at once): the bench waits, and reports how long
SOCKET_TIMEOUT_S = 3600.0


# --- the dataflow --------------------------------------------------------------------------------------------
def branches(channels: int) -> list[int]:
    """``channels`` split into as few stages as MAX_PARALLELISM allows, as evenly as possible."""
    n = math.ceil(channels / MAX_PARALLELISM)
    return [channels // n + (1 if i < channels % n else 0) for i in range(n)]


def pipeline_text(channels: int, sink_channels: int, workers: int, rows: int) -> str:
    stages: list[dict[str, Any]] = []
    sink_inputs = []
    for b, width in enumerate(branches(channels)):
        stages.append({"name": f"src{b}", "parallelism": width,
                       "source": {"generator": {"function": "gen", "rowsPerStep": rows * width}}})
        stages.append({"name": f"agg{b}", "parallelism": width, "inputs": [{"stage": f"src{b}", "partition": "forward"}],
                       "aggregate": {"keyBy": ["k"], "aggregations": [{"name": "n", "op": "count"}]}})
        sink_inputs.append({"stage": f"agg{b}", "partition": "hash", "keys": ["k"]})
    stages.append({"name": "out", "parallelism": sink_channels, "inputs": sink_inputs,
                   "sink": {"parquet": {"path": "out"}}})
    doc = {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": NAME},
           "spec": {"entryPoint": "pipeline.py", "workers": workers, "stages": stages,
                    "checkpoint": {"intervalSteps": 0}}}
    return json.dumps(doc)  # JSON is YAML


def build_graph(args: argparse.Namespace, base_dir: Path) -> Graph:
    spec = parse_pipeline(pipeline_text(args.channels, args.sink_channels, args.workers, args.rows), base_dir,
                          source="bench", check_entry_point=False)
    return Graph.physical(spec)


# --- batched script calls ------------------------------------------------------------------------------------
class _Queued:
    """Stands in for a registered script: queues each call on the current pipeline and answers ``ok`` at once
    (the real answers come back from ``Batch.run``)."""

    def __init__(self, script: Any, ok: Any) -> None:
        self.script = script
        self.ok = ok
        self.pipe: redis.client.Pipeline | None = None

    def __call__(self, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        assert self.pipe is not None
        self.script(keys=keys, args=args, client=self.pipe)
        return self.ok


class Batch:
    """A ``LineageTables`` whose script calls go on a Redis pipeline: ``complete``, ``collect`` and
    ``bury_range`` build their keys and arguments as always, and the same Lua runs, in one round trip per batch."""

    def __init__(self, client: redis.Redis, run: str) -> None:
        self.client = client
        self.tables = LineageTables(client, NAME)
        self.tables.run = run
        self._queued = []
        for attr, ok in (("_complete", 1), ("_collect", []), ("_bury_range", 1)):
            queued = _Queued(getattr(self.tables, attr), ok)
            setattr(self.tables, attr, queued)
            self._queued.append(queued)

    def run(self, calls: Callable[[LineageTables], None]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for q in self._queued:
            q.pipe = pipe
        calls(self.tables)
        return list(pipe.execute())


# --- the history ---------------------------------------------------------------------------------------------
@dataclass
class History:
    graph: Graph
    tables: LineageTables
    batch: Batch
    workers: list[WorkerId]
    placement: dict[Channel, WorkerId]
    rows: int
    sink_channels: int
    keepers: dict[WorkerId, EpochKeeper] = field(default_factory=dict)
    ckpt_epoch: int = 0
    snapshots: dict[Channel, tuple[int, str]] = field(default_factory=dict)
    completions: int = 0
    collected: int = 0
    trimmed: int = 0
    stateful: list[Channel] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.keepers = {w: EpochKeeper(w) for w in self.workers}
        self.stateful = [ch for ch in self.graph.channels() if self.graph.is_stateful(ch.stage)]

    def step_tasks(self, step: int) -> list[Task]:
        offsets = {ch: (self.rows * (step - 1), self.rows * step)
                   for s in self.graph.sources() for ch in (Channel(s.name, i) for i in range(s.parallelism))}
        return [replace(t, ckpt=self.ckpt_epoch) if t.kind is TaskKind.SOURCE else t
                for t in self.graph.step_tasks(step, offsets)]

    def completion(self, task: Task, clocks: dict[str, VectorClock]) -> tuple[WorkerId, Completion]:
        """What the worker's sidecar reports when ``task`` finishes (``worker/sidecar.py: _do_task_done``)."""
        worker = self.placement[task.ref]
        keeper = self.keepers[worker]
        inputs = [o.key() for o in self.graph.inputs_of(task)]
        keeper.consume([clocks[n] for n in inputs], task.ckpt if task.kind is TaskKind.SOURCE else None)
        outputs = self.graph.outputs_of(task)
        clock = keeper.produce(len(outputs))
        per_output = self.rows if task.kind is TaskKind.SOURCE else max(1, self.rows // self.sink_channels)
        for o in outputs:
            clocks[o.key()] = clock
        stateful = self.graph.is_stateful(task.stage)
        rows_in = task.offsets[1] - task.offsets[0] if task.offsets else self.rows * len(inputs)
        return worker, Completion(
            task=task,
            outputs=[(o.key(), per_output) for o in outputs],
            consumed=[] if stateful else inputs,  # a stateful consumer keeps its inputs until a checkpoint
            state_step=task.step if stateful else None,
            event={"t": "done", "w": worker, "id": task.id, "step": task.step, "kind": task.kind.value,
                   "rows_in": rows_in, "rows_out": per_output * len(outputs), "recovery": False},
            stats={"tasks": 1, "rows_in": rows_in},
            clock=clock.encode(),
        )

    def complete(self, tasks: Sequence[Task], clocks: dict[str, VectorClock]) -> None:
        done = [self.completion(t, clocks) for t in tasks]

        def calls(t: LineageTables) -> None:
            for worker, completion in done:
                t.complete(worker, completion)

        answers = self.batch.run(calls)
        refused = [(d[1].task.id, a) for d, a in zip(done, answers) if a != 1]
        if refused:
            raise RuntimeError(f"completions refused: {refused[:5]}")
        self.completions += len(done)

    def collect(self) -> None:
        """Every worker's garbage collection (``worker/background.py``)."""
        def calls(t: LineageTables) -> None:
            for w in self.workers:
                t.collect(w)

        answers = self.batch.run(calls)
        self.collected += sum(len(a) for a in answers if isinstance(a, list))

    def step(self, step: int, in_flight: bool = False) -> None:
        tasks = self.step_tasks(step)
        self.tables.assign([(self.placement[t.ref], t) for t in tasks])
        clocks: dict[str, VectorClock] = {}
        for stage in self.graph.order:  # a stage's inputs are all complete before its tasks complete
            if in_flight and self.graph.task_kind(stage) is not TaskKind.SOURCE:
                continue  # in flight: every source done, the rest pending
            self.complete([t for t in tasks if t.stage == stage], clocks)
        self.tables.r.delete(self.tables.k("inbox"))  # the coordinator reads (pops) every event
        if not in_flight:
            self.collect()

    def checkpoint(self, step: int) -> None:
        """A checkpoint whose cut follows ``step`` commits: what ``CheckpointManager._after_commit`` does."""
        self.ckpt_epoch += 1
        edges_of = {ch: sorted({o.edge.key() for o in self.graph.inputs_of(Task(TaskKind.AGGREGATE, ch.stage, ch.index, 1))})
                    for ch in self.stateful}
        before = dict(self.snapshots)

        def calls(t: LineageTables) -> None:
            for ch, edges in edges_of.items():
                t.bury_range(edges, 1, step, before[ch][0] + 1 if ch in before else 1)

        self.batch.run(calls)
        self.snapshots = {ch: (step, f"{self.ckpt_epoch}/{ch.key()}") for ch in self.stateful}
        self.trimmed += self.tables.trim(step)
        self.collect()


def populate(history: History, steps: int, checkpoint_every: int, console: Console) -> float:
    started = time.perf_counter()
    every = max(1, steps // 20)
    for step in range(1, steps + 1):
        history.step(step)
        if checkpoint_every and step % checkpoint_every == 0:
            history.checkpoint(step)
        if step % every == 0 or step == steps:
            elapsed = time.perf_counter() - started
            used = int(history.tables.r.info("memory")["used_memory"])
            console.print(f"  step {step:>5,d}/{steps:,d}  {history.completions:>10,d} completions  "
                          f"{elapsed:7.1f} s  ETA {elapsed / step * (steps - step):6.0f} s  Redis {used / 2**20:8.1f} MiB",
                          highlight=False)
    history.step(steps + 1, in_flight=True)
    return time.perf_counter() - started


# --- the recovery --------------------------------------------------------------------------------------------
def victim(placement: Mapping[Channel, WorkerId], graph: Graph, workers: Sequence[WorkerId]) -> WorkerId:
    def weight(w: WorkerId) -> tuple[int, int, int]:
        mine = [ch for ch, owner in placement.items() if owner == w]
        return (sum(graph.is_stateful(ch.stage) for ch in mine), len(mine), -workers.index(w))
    return max(workers, key=weight)


@dataclass
class Measured:
    snapshot_s: list[float]
    redis_s: float  # of a snapshot, the time Redis spent running its commands (its slow log), on average
    snapshot_gc_s: list[float]
    plan_s: list[float]
    plan_gc_s: list[float]
    apply_s: float
    plan: RecoveryPlan
    view_sizes: dict[str, int]
    profile: str = ""


class GcClock:
    """Time spent in Python's cyclic garbage collector (a full collection walks every object of the snapshot)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._t0 = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._t0
        self.full += info["generation"] == 2


GC = GcClock()


def timed(fn: Callable[[], Any], gc_s: list[float] | None = None) -> tuple[Any, float]:
    """``fn()`` and its wall time; the part of it spent in cyclic GC is appended to ``gc_s``."""
    before = GC.seconds
    t0 = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - t0
    if gc_s is not None:
        gc_s.append(GC.seconds - before)
    return out, elapsed


def profiled(fn: Callable[[], Any], top: int) -> str:
    prof = cProfile.Profile()
    prof.runcall(fn)
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def recover(history: History, dead: WorkerId, repeat: int, profile: int) -> Measured:
    """The coordinator's lineage recovery (``coordinator/losses.py: recover``), each phase timed."""
    tables, graph = history.tables, history.graph
    survivors = [w for w in history.workers if w != dead]
    epoch = tables.epoch() + 1
    snapshots = dict(history.snapshots)
    tables.lock_exclusive("bench")
    try:
        snap_s: list[float] = []
        snap_gc: list[float] = []
        view: TablesView | None = None
        saved = {str(k): str(v) for k, v in tables.r.config_get("slowlog-*").items()}
        tables.r.config_set("slowlog-log-slower-than", 0)  # log every command, so the snapshot's add up
        tables.r.config_set("slowlog-max-len", 100_000)
        tables.r.slowlog_reset()
        for _ in range(repeat):
            view = None  # one view alive at a time
            view, s = timed(lambda: tables.snapshot([*survivors, dead]), snap_gc)
            snap_s.append(s)
        assert view is not None
        redis_s = sum(int(e["duration"]) for e in tables.r.slowlog_get(100_000)
                      if bytes(e["command"]).split(b" ")[0].upper() in (b"HGETALL", b"SMEMBERS")) / 1e6 / repeat
        for key, value in saved.items():
            tables.r.config_set(key, value)
        v = view
        plan_s: list[float] = []
        plan_gc: list[float] = []
        plan: RecoveryPlan | None = None
        for _ in range(repeat):
            plan, s = timed(lambda: plan_recovery(graph, v, dead, survivors, epoch, snapshots), plan_gc)
            plan_s.append(s)
        assert plan is not None
        text = ""
        if profile:
            text = ("snapshot\n" + profiled(lambda: tables.snapshot([*survivors, dead]), profile)
                    + "plan_recovery\n" + profiled(lambda: plan_recovery(graph, v, dead, survivors, epoch, snapshots), profile))
        pending = sum(len(v.ntt.get(w, ())) for w in survivors)
        _, apply_s = timed(lambda: tables.apply(plan))
    finally:
        tables.unlock_exclusive("bench")
    # the plan is in place: the dead worker is fenced off and its tasks are the survivors'
    after = sum(len(tables.tasks_of(w)) for w in survivors)
    if dead in tables.alive() or after != pending + len(plan.tasks):
        raise RuntimeError(f"plan not applied: {after} tasks pending on survivors, expected {pending} + {len(plan.tasks)}")
    sizes = {"pt": len(v.pt), "lt": len(v.lt), "rows": len(v.rows), "ct": len(v.ct),
             "ntt": sum(len(t) for t in v.ntt.values()), "not": sum(len(n) for n in v.not_.values())}
    return Measured(snap_s, redis_s, snap_gc, plan_s, plan_gc, apply_s, plan, sizes, text)


# --- the report ----------------------------------------------------------------------------------------------
def redis_figures(r: redis.Redis, tables: LineageTables) -> dict[str, int]:
    info = r.info("memory")
    return {"used_memory": int(info["used_memory"]), "keys": int(r.dbsize()),
            **{f"hlen_{h}": int(r.hlen(tables.k(h))) for h in ("lt", "pt", "rows", "meta", "ct")}}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


def spread(xs: Sequence[float]) -> str:
    return f"{ms(min(xs))} / {ms(statistics.median(xs))} / {ms(max(xs))}"


def report(result: dict[str, Any], console: Console) -> None:
    med = statistics.median
    table = Table(title=f"lineage recovery planning: {result['source_channels']:,d} × {result['stateful_channels']:,d} "
                        f"channels, {result['steps']:,d} steps, {result['workers']} workers"
                        + (f", checkpoint every {result['checkpoint_every']}" if result["checkpoint_every"] else
                           ", no checkpoint"))
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("stages (physical)", " ".join(f"{s}:{p}" for s, p in result["stages"].items())),
        ("task completions recorded (Lua)", f"{result['completions']:,d}"),
        ("populating took", f"{result['populate_s']:,.1f} s"),
        ("redis-py reply parser", "hiredis" if result["hiredis"] else "pure Python (no hiredis)"),
        ("Redis used_memory after populating", f"{result['redis']['used_memory'] / 2**20:,.1f} MiB"),
        ("Redis keys", f"{result['redis']['keys']:,d}"),
        ("LT / PT / rows / meta entries", " / ".join(f"{result['redis'][f'hlen_{h}']:,d}" for h in ("lt", "pt", "rows", "meta"))),
        ("killed worker (stateful channels)", f"{result['dead']} ({result['dead_stateful']})"),
        ("objects lost with it", f"{result['lost']:,d}"),
        (f"(a) snapshot ms (min / median / max of {len(result['snapshot_s'])})", spread(result["snapshot_s"])),
        ("    of which Redis runs its commands (mean)", ms(result["redis_s"])),
        ("    of which Python's cyclic GC", spread(result["snapshot_gc_s"])),
        (f"(b) plan_recovery ms (min / median / max of {len(result['plan_s'])})", spread(result["plan_s"])),
        ("    of which Python's cyclic GC", spread(result["plan_gc_s"])),
        ("(c) apply ms", ms(result["apply_s"])),
        ("tasks in plan (rebuilds)", f"{result['tasks']:,d} ({result['rebuilt']})"),
        ("objects resurrected", f"{result['resurrect']:,d}"),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    plan = med(result["plan_s"])
    snap = med(result["snapshot_s"])
    console.print(f"snapshot ÷ plan {snap / plan:.1f}   apply ÷ plan {result['apply_s'] / plan:.2f}   "
                  f"plan µs per planned task {plan * 1e6 / max(result['tasks'], 1):.1f}   "
                  f"Redis bytes per recorded object {result['redis']['used_memory'] / max(result['redis']['hlen_rows'], 1):.0f}   "
                  f"lock held (a+b+c) {(snap + plan + result['apply_s']) * 1000:,.0f} ms", highlight=False)
    console.print(f"planner < {TARGET_S:g} s: [bold]{'yes' if plan < TARGET_S else 'no'}[/bold]   "
                  f"(snapshot + planner < {TARGET_S:g} s: {'yes' if snap + plan < TARGET_S else 'no'})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--channels", type=int, help=f"source channels, and as many stateful ones (default {FULL['channels']})")
    parser.add_argument("--steps", type=int, help=f"steps of history before the loss (default {FULL['steps']})")
    parser.add_argument("--workers", type=int, help=f"workers (default {FULL['workers']})")
    parser.add_argument("--small", action="store_true",
                        help=f"a quick run: {SMALL['channels']} channels, {SMALL['steps']} steps, {SMALL['workers']} workers")
    parser.add_argument("--sink-channels", type=int, default=1, help="parallelism of the sink (hash from the aggregates)")
    parser.add_argument("--rows", type=int, default=100, help="rows per source channel and step (the rows table only)")
    parser.add_argument("--checkpoint-every", type=int, default=0,
                        help="commit a checkpoint every K steps (0: none, the worst case)")
    parser.add_argument("--kill", help="the worker to lose (default: the one holding the most stateful channels)")
    parser.add_argument("--repeat", type=int, default=3, help="snapshots and plans timed (each is read-only)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="cProfile one snapshot and one plan, print the N costliest functions of each")
    parser.add_argument("--redis-url", help="use this Redis (its keys of this bench are cleared) instead of a private one")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line too")
    args = parser.parse_args()
    preset = SMALL if args.small else FULL
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    console = Console(width=160)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped bench still stops its redis-server

    work = Path(tempfile.mkdtemp(prefix="lineage-scale-"))
    server = None
    try:
        graph = build_graph(args, work)
        if args.redis_url:
            client = redis.Redis.from_url(args.redis_url, socket_timeout=SOCKET_TIMEOUT_S)
        else:
            server = EmbeddedRedis(work / "redis").start()
            client = redis.Redis.from_url(server.url, socket_timeout=SOCKET_TIMEOUT_S)
        tables = LineageTables(client, NAME)
        tables.clear()
        workers = [WorkerId(f"w{i}") for i in range(args.workers)]
        placement = initial_placement(graph.channels(), workers)
        tables.begin_run("bench-run")
        for w in workers:
            tables.admit(w)
        tables.set_placement(placement)
        history = History(graph, tables, Batch(client, "bench-run"), workers, placement, args.rows, args.sink_channels)
        stages = {s.name: s.parallelism for s in graph.spec.stages}
        stateful = sum(p for s, p in stages.items() if graph.is_stateful(s))
        console.print(f"[bold]{stateful:,d} × {stateful:,d} channels[/bold] ({' '.join(f'{s}:{p}' for s, p in stages.items())}), "
                      f"{args.steps:,d} steps, {args.workers} workers; populating through the Lua scripts",
                      highlight=False)
        populate_s = populate(history, args.steps, args.checkpoint_every, console)
        figures = redis_figures(client, tables)
        dead = WorkerId(args.kill) if args.kill else victim(placement, graph, workers)
        if dead not in workers:
            parser.error(f"--kill {dead}: no such worker (w0..w{args.workers - 1})")
        console.print(f"losing {dead}; timing snapshot, plan and apply", highlight=False)
        m = recover(history, dead, max(1, args.repeat), args.profile)
        result = {
            "source_channels": sum(p for s, p in stages.items() if graph.task_kind(s) is TaskKind.SOURCE),
            "stateful_channels": stateful, "steps": args.steps, "workers": args.workers,
            "checkpoint_every": args.checkpoint_every, "stages": stages, "completions": history.completions,
            "populate_s": round(populate_s, 2), "redis": figures, "dead": dead,
            "dead_stateful": sum(1 for ch, w in placement.items() if w == dead and graph.is_stateful(ch.stage)),
            "lost": len(m.plan.lost), "snapshot_s": m.snapshot_s, "redis_s": m.redis_s, "snapshot_gc_s": m.snapshot_gc_s,
            "plan_s": m.plan_s, "plan_gc_s": m.plan_gc_s, "apply_s": m.apply_s,
            "tasks": len(m.plan.tasks), "rebuilt": len(m.plan.rebuilt), "resurrect": len(m.plan.resurrect),
            "view": m.view_sizes, "hiredis": bool(redis.utils.HIREDIS_AVAILABLE), "planner_under_1s": statistics.median(m.plan_s) < TARGET_S,
        }
        if m.profile:
            print(m.profile)
        report(result, console)
        if args.json:
            print(json.dumps(result))
        return 0
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
