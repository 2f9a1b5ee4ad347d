"""The cluster as a value: state is a pure fold of a totally ordered command log.

Onyx's design, kept small. Every decision that must outlive the process that
took it — who is in the cluster and who watches whom, which step started with
which source offsets, which committed, which checkpoint is the resume point,
which recovery epoch is current — is a :class:`Command` appended to the log
(``zklog.py``). Every reader (the coordinator, each worker's sidecar, a
restarted operator) folds the same commands with :func:`apply` and so holds
the *same* :class:`ClusterState` after the same sequence number. ``apply`` is
pure and deterministic, and idempotent where a fact can be reported twice
(two peers reporting one death, a replayed step started again with the same
offsets): a command that no longer applies leaves the state as it was.

Membership: the ring and the two-phase join
-------------------------------------------
``watches`` maps each member to the member it watches (its ring successor);
every member is watched by exactly one other, unless it is alone. A peer
joins in two phases so that exactly one existing member moves its watch::

    (outside) --prepare-join--> PREPARED (target T = V[seq mod |V|]; aborted at once if V is empty)
    PREPARED  --notify-watchers (it now watches T)--> NOTIFIED
    NOTIFIED  --accept-join (sent by T's watcher W, who now watches it)--> MEMBER
    PREPARED | NOTIFIED --abort-join, or T left--> (outside; the joiner tries again)
    MEMBER    --leave (its watcher saw its heartbeat expire; or its pod/process is gone)--> (outside)

where V = the members not already targeted by another joiner, sorted. On a
``leave`` of F the peer that watched F now watches the peer F watched: the
ring closes transitively and every reader computes the same answer, so no
one has to coordinate who takes over. ``peer-gc`` asks its sender to check
every member's heartbeat and report the dead ones: the fallback when every
member died before anyone could report it.

Run progress
------------
``run-started`` opens a run epoch (a coordinator started or restarted; a
fresh run forgets progress, a resumed one keeps it) and dissolves the ring:
peers of an earlier run are no longer members, so they stop — except those
a resumed run *keeps* (``kept``: workers still up that its coordinator took
over, ``coordinator/admission.py``), around which the ring closes as if every
other member had left. ``step-started``
is sent as a step's tasks are handed out, accepted before any later command
(so before the step's ``step-committed``), and carries its offsets (kept
for every step after the newest checkpoint, so a resume re-runs those steps
exactly, even if Redis lost its step log);
``step-committed`` is sent as the next step's tasks go out and accepted
before the step's output is released; ``recovery`` before a
recovery plan is applied, starting a new epoch; ``evacuation`` before a leaving
worker's channels move to the others (a new epoch, as a recovery's, with nothing
re-run: ``coordinator/evacuation.py``); ``resumed`` when a restarted
coordinator reopened a cut (the steps after it commit again). A worker that is not a
member of the current epoch's ring (a *zombie*) is fenced off.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ftpipeline.lineage.stepclock import StepClock, before_of

KINDS = frozenset({
    "prepare-join", "notify-watchers", "accept-join", "abort-join", "leave", "peer-gc",
    "run-started", "step-started", "step-committed", "checkpoint-committed", "recovery", "evacuation", "suspended",
    "resumed",
})
LEFT_KEPT = 32      # recent departures kept in the state (for status and tests); older ones are forgotten
STEPS_KEPT = 1000   # offsets of at most this many steps after the resume point (bounds the snapshot)


@dataclass(frozen=True)
class Command:
    seq: int                       # position in the log (the sequential znode's number)
    kind: str
    body: Mapping[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default)


@dataclass(frozen=True)
class ClusterState:
    seq: int = -1                                       # last command folded in
    members: Mapping[str, str] = field(default_factory=dict)    # peer -> worker
    watches: Mapping[str, str] = field(default_factory=dict)    # watcher peer -> watched peer
    prepared: Mapping[str, str] = field(default_factory=dict)   # joining peer -> target it will watch
    joining: Mapping[str, str] = field(default_factory=dict)    # joining peer -> worker
    notified: frozenset[str] = frozenset()
    left: tuple[tuple[str, str, str], ...] = ()         # recent (peer, worker, reason)
    run_epoch: int = 0
    epoch: int = 0                                      # recovery epoch (fencing)
    committed: int = 0
    # offsets of every step after the resume point (committed or not): a resume re-runs them exactly
    started: Mapping[int, Mapping[str, tuple[int, int]]] = field(default_factory=dict)
    clocks: Mapping[int, StepClock] = field(default_factory=dict)  # each started step's clock (lineage/stepclock.py)
    frontier: Mapping[str, int] = field(default_factory=dict)   # where each source channel continues
    checkpoint: Mapping[str, int] | None = None         # {"epoch", "boundary"} of the resume point
    recoveries: int = 0
    suspended: bool = False
    duplicate_commits: int = 0                          # step-committed for a step already committed
    conflicting_starts: int = 0                         # a step started again with other offsets

    # --- derived -----------------------------------------------------------
    def watcher_of(self, peer: str) -> str | None:
        for w, t in self.watches.items():
            if t == peer:
                return w
        return None

    def acceptor(self, joiner: str) -> str | None:
        """Who must accept a notified joiner: the watcher of its target (the target itself when alone)."""
        target = self.prepared.get(joiner)
        if target is None or target not in self.members:
            return None
        return self.watcher_of(target) or target

    def peer_of(self, worker: str) -> str | None:
        """The peer a worker is in the ring, or is joining it as."""
        for p, w in [*self.members.items(), *self.joining.items()]:
            if w == worker:
                return p
        return None

    def is_ring(self) -> bool:
        """Invariant: members form one cycle by ``watches`` (or there is one member and no watch)."""
        if len(self.members) <= 1:
            return not self.watches
        if set(self.watches) != set(self.members) or set(self.watches.values()) != set(self.members):
            return False
        start = next(iter(sorted(self.members)))
        seen, at = set(), start
        while at not in seen:
            seen.add(at)
            at = self.watches[at]
        return at == start and seen == set(self.members)

    # --- serialisation (snapshots) ------------------------------------------
    def to_json(self) -> str:
        return json.dumps({
            "seq": self.seq, "members": dict(self.members), "watches": dict(self.watches),
            "prepared": dict(self.prepared), "joining": dict(self.joining), "notified": sorted(self.notified),
            "left": [list(x) for x in self.left], "run_epoch": self.run_epoch, "epoch": self.epoch,
            "committed": self.committed,
            "started": {str(s): {c: list(o) for c, o in offs.items()} for s, offs in self.started.items()},
            # a clock's parts apart, as snapshots have held them since before there were clocks
            "marks": {str(s): c.watermark for s, c in self.clocks.items() if c.watermark is not None},
            "befores": {str(s): c.before for s, c in self.clocks.items() if c.watermark is not None},
            "times": {str(s): c.now for s, c in self.clocks.items() if c.now is not None},
            "tables": {str(s): dict(c.tables) for s, c in self.clocks.items() if c.tables},
            "frontier": dict(self.frontier), "checkpoint": dict(self.checkpoint) if self.checkpoint else None,
            "recoveries": self.recoveries, "suspended": self.suspended,
            "duplicate_commits": self.duplicate_commits, "conflicting_starts": self.conflicting_starts,
        }, sort_keys=True)

    @staticmethod
    def from_json(text: str | bytes) -> ClusterState:
        d = json.loads(text)
        return ClusterState(
            seq=int(d["seq"]), members=dict(d["members"]), watches=dict(d["watches"]),
            prepared=dict(d["prepared"]), joining=dict(d["joining"]), notified=frozenset(d["notified"]),
            left=tuple((str(a), str(b), str(c)) for a, b, c in d["left"]), run_epoch=int(d["run_epoch"]),
            epoch=int(d["epoch"]), committed=int(d["committed"]),
            started={int(s): {c: (int(o[0]), int(o[1])) for c, o in offs.items()} for s, offs in d["started"].items()},
            clocks=_clocks(d),
            frontier={c: int(v) for c, v in d["frontier"].items()},
            checkpoint={k: int(v) for k, v in d["checkpoint"].items()} if d["checkpoint"] else None,
            recoveries=int(d["recoveries"]), suspended=bool(d["suspended"]),
            duplicate_commits=int(d["duplicate_commits"]), conflicting_starts=int(d["conflicting_starts"]),
        )


# --- the fold ------------------------------------------------------------------
def _remove_peer(s: ClusterState, peer: str, reason: str) -> ClusterState:
    """``peer`` is gone: close the ring around it and abort joins that depended on it."""
    members, watches = dict(s.members), dict(s.watches)
    prepared, joining, notified = dict(s.prepared), dict(s.joining), set(s.notified)
    worker = members.pop(peer, None) or joining.get(peer, "")
    if peer in s.members:
        watcher, successor = s.watcher_of(peer), watches.pop(peer, None)
        if watcher is not None and successor is not None:
            if watcher == successor:      # a ring of two becomes one peer, watching no one
                watches.pop(watcher, None)
            else:
                watches[watcher] = successor
        for joiner, target in s.prepared.items():   # their target is gone: they must try again
            if target == peer:
                prepared.pop(joiner)
                joining.pop(joiner, None)
                notified.discard(joiner)
    prepared.pop(peer, None)
    joining.pop(peer, None)
    notified.discard(peer)
    left = (*s.left, (peer, worker, reason))[-LEFT_KEPT:]
    return replace(s, members=members, watches=watches, prepared=prepared, joining=joining,
                   notified=frozenset(notified), left=left)


def _prepare(s: ClusterState, seq: int, peer: str, worker: str) -> ClusterState:
    if peer in s.members or peer in s.prepared:
        return s
    if not s.members:  # the first peer is a member at once, watched by no one
        return replace(s, members={**s.members, peer: worker})
    depended = set(s.prepared.values())
    candidates = sorted(set(s.members) - depended)
    if not candidates:  # every member is some joiner's target: abort; the joiner tries again later
        return s
    target = candidates[seq % len(candidates)]
    return replace(s, prepared={**s.prepared, peer: target}, joining={**s.joining, peer: worker})


def _accept(s: ClusterState, peer: str) -> ClusterState:
    if peer not in s.notified:
        return s
    target = s.prepared[peer]
    acceptor = s.acceptor(peer)
    if acceptor is None:
        return s
    watches = dict(s.watches)
    watches[acceptor] = peer
    watches[peer] = target
    prepared, joining = dict(s.prepared), dict(s.joining)
    del prepared[peer]
    worker = joining.pop(peer)
    return replace(s, members={**s.members, peer: worker}, watches=watches, prepared=prepared, joining=joining,
                   notified=s.notified - {peer})


def _clocks(d: Mapping[str, Any]) -> dict[int, StepClock]:
    """The clocks of a snapshot's started steps, from their parts (see ``to_json``)."""
    marks, times, tables, befores = d.get("marks", {}), d.get("times", {}), d.get("tables", {}), d.get("befores", {})
    return {int(s): StepClock(int(marks[s]) if s in marks else None, int(times[s]) if s in times else None,
                              dict(tables.get(s) or {}), before_of(befores, marks.get(s), s))
            for s in d["started"]}


def _start_step(s: ClusterState, step: int, offsets: Mapping[str, Any], clock: StepClock) -> ClusterState:
    offs = {c: (int(v[0]), int(v[1])) for c, v in offsets.items()}
    known = s.started.get(step)
    if known is not None:  # a replay: it must be the same step as before
        same = dict(known) == offs and s.clocks.get(step, StepClock()).watermark == clock.watermark
        return s if same else replace(s, conflicting_starts=s.conflicting_starts + 1)
    if step <= max(s.committed, (s.checkpoint or {}).get("boundary", 0)):
        return s  # older than what is kept
    started = {**s.started, step: offs}
    if len(started) > STEPS_KEPT:
        started = dict(sorted(started.items())[-STEPS_KEPT:])
    clocks = {k: v for k, v in {**s.clocks, step: clock}.items() if k in started}
    frontier = {**s.frontier, **{c: hi for c, (_, hi) in offs.items()}}
    return replace(s, started=started, clocks=clocks, frontier=frontier)


def _commit_step(s: ClusterState, step: int) -> ClusterState:
    if step <= s.committed:
        return replace(s, duplicate_commits=s.duplicate_commits + 1)
    if step != s.committed + 1:
        return s  # out of order: the coordinator commits in order, so this cannot be a decision
    return replace(s, committed=step)


def apply(s: ClusterState, cmd: Command) -> ClusterState:
    """Fold one command into the state. Pure: same state and command, same result, on every peer."""
    if cmd.seq <= s.seq:
        return s  # already folded (a snapshot covers it)
    k, b = cmd.kind, cmd.body
    if k == "prepare-join":
        s = _prepare(s, cmd.seq, str(b["peer"]), str(b["worker"]))
    elif k == "notify-watchers":
        if b["peer"] in s.prepared:
            s = replace(s, notified=s.notified | {str(b["peer"])})
    elif k == "accept-join":
        s = _accept(s, str(b["peer"]))
    elif k in ("abort-join", "leave"):
        peer = str(b["peer"])
        if peer in s.members or peer in s.prepared:
            s = _remove_peer(s, peer, str(b.get("reason", k)))
    elif k == "run-started":
        fresh = bool(b.get("fresh"))
        ring = s
        if not fresh:  # the peers the new run keeps stay members; the ring closes around the others
            kept = {str(p) for p in b.get("kept", ())}
            for peer in sorted(set(s.members) - kept):
                ring = _remove_peer(ring, peer, "a new run started")
        s = replace(ClusterState() if fresh else s, members=dict(ring.members) if not fresh else {},
                    watches=dict(ring.watches) if not fresh else {}, prepared={}, joining={},
                    notified=frozenset(), run_epoch=int(b["run_epoch"]), epoch=max(s.epoch, int(b["epoch"])),
                    suspended=False)
        if not fresh:  # a resumed run restarts from its checkpoint; later steps replay with their offsets
            boundary = (s.checkpoint or {}).get("boundary", 0)
            s = replace(s, committed=min(s.committed, boundary))
    elif k == "step-started":
        s = _start_step(s, int(b["step"]), b["offsets"], StepClock.from_json(b))
    elif k == "step-committed":
        s = _commit_step(s, int(b["step"]))
    elif k == "checkpoint-committed":
        boundary = int(b["boundary"])  # the new resume point: steps up to it are never re-run
        s = replace(s, checkpoint={"epoch": int(b["epoch"]), "boundary": boundary},
                    started={k: v for k, v in s.started.items() if k > boundary},
                    clocks={k: v for k, v in s.clocks.items() if k > boundary})
    elif k == "recovery":
        s = replace(s, epoch=max(s.epoch, int(b["epoch"])), recoveries=s.recoveries + 1)
        if b.get("strategy") == "checkpoint":  # rolled back (or resumed) to a cut: later steps commit again
            s = replace(s, committed=int(b.get("boundary") or 0))
    elif k == "evacuation":  # a leaving worker's channels moved to the others: a new epoch, nothing re-runs
        s = replace(s, epoch=max(s.epoch, int(b["epoch"])))
    elif k == "suspended":
        s = replace(s, suspended=True)
    elif k == "resumed":  # a (re)started coordinator opened a cut: the steps after it commit again
        s = replace(s, suspended=False, epoch=max(s.epoch, int(b.get("epoch", 0))))
        if "boundary" in b:
            s = replace(s, committed=int(b["boundary"]))
    return replace(s, seq=cmd.seq)


def fold(commands: Iterable[Command], start: ClusterState | None = None) -> ClusterState:
    state = start or ClusterState()
    for cmd in commands:
        state = apply(state, cmd)
    return state
