"""A spec change to a running pipeline: an upgrade from a checkpoint, a health check, a rollback.

Users change a running pipeline's image, code version, resources or
parallelism by editing its spec, and expect what the Flink Kubernetes
Operator does: the running job is checkpointed and stopped, the new spec
starts from that checkpoint, and if the new spec never becomes healthy the
last stable one is started again, by itself, from the same checkpoint. The
state a pipeline is in (``status.lifecycleState``)::

    CREATED    --first attempt--> DEPLOYING --a step committed--> RUNNING (this spec is the stable one)
    RUNNING    --spec changed--> UPGRADING: upgradeMode checkpoint: a checkpoint is taken, then the run
                 stops; stateless: it stops at once --the new spec's run commits a step--> RUNNING
    UPGRADING  --no step committed within spec.upgrade.healthDeadlineSeconds, the new spec cannot run,
                 or its restart budget is spent--> ROLLED_BACK: the last stable spec runs again, resumed
                 from the same checkpoint (the object's spec stays as written: status.stableSpec
                 says what runs; condition RolledBack, an Event)
    ROLLED_BACK --spec changed--> UPGRADING (from the rolled-back run)
    SUSPENDED, FAILED, RETRYING --spec changed, a stable spec known--> UPGRADING (on trial at its next attempt)
    any        --suspend / input ended / failed--> SUSPENDED / SUCCEEDED / FAILED

What is not an upgrade: ``suspend``, ``checkpointNonce``, ``restartNonce``, ``restoreFrom``
(each has its own meaning) and fields the run never reads
(``progressDeadlineSeconds``, ``upgrade``). A change made while the pipeline
is not running (suspended, failed, succeeded, retrying) is what its next
attempt runs, on trial as any upgrade once a stable spec is known.

A stateless upgrade starts over as a new run: empty state, the sources
from their starting offsets, and the sinks' existing output handled by
``spec.existingOutput``; it is not rolled back (the state a rollback would
resume from is what it discarded). A spec changed while no operator
watched is on trial when the next one starts. Pure logic over a clock: the
runner (``runner.py``) asks it what to do.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ftpipeline.spec.schema import LIFECYCLE
from ftpipeline_operator.render import digest

CREATED, DEPLOYING, RUNNING, UPGRADING, ROLLED_BACK, SUSPENDED, SUCCEEDED, FAILED = LIFECYCLE
NOT_UPGRADES = frozenset({"suspend", "checkpointNonce", "restartNonce", "progressDeadlineSeconds", "upgrade",
                          "restoreFrom"})
TAKEN_IN = frozenset({"checkpointNonce", "restoreFrom"})  # what a running attempt takes in without stopping
DEFAULT_HEALTH_DEADLINE_S = 300.0
CHECKPOINT_WAIT_S = 120.0  # an upgrade waits this long for its checkpoint, then stops on the newest one


def run_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a spec that decides what runs."""
    return {k: v for k, v in spec.items() if k not in NOT_UPGRADES}


def spec_digest(spec: Mapping[str, Any]) -> str:
    return digest(run_spec(spec))[:16]


@dataclass(frozen=True)
class UpgradePolicy:
    mode: str = "checkpoint"            # or "stateless"
    health_deadline_s: float = DEFAULT_HEALTH_DEADLINE_S
    rollback: bool = True

    @staticmethod
    def of(spec: Mapping[str, Any]) -> UpgradePolicy:
        u = spec.get("upgrade") or {}
        return UpgradePolicy(str(u.get("mode", "checkpoint")),
                             float(u.get("healthDeadlineSeconds", DEFAULT_HEALTH_DEADLINE_S)),
                             bool(u.get("rollback", True)))


def _locked(method: Any) -> Any:
    def call(self: Upgrades, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)
    return call


class Upgrades:
    """One pipeline's lifecycle across attempts (the runner keeps one per pipeline). Kopf's handler thread
    reports spec changes and the attempt's thread everything else: each call holds the lock."""

    def __init__(self, status: Mapping[str, Any], clock: Callable[[], float],
                 spec: Mapping[str, Any] | None = None) -> None:
        self._lock = threading.RLock()
        self.clock = clock
        self.state = str(status.get("lifecycleState") or CREATED)
        # the newest spec that committed a step: an older operator kept it in the status; now its ConfigMap
        # (``stable.py``) does, read by the first attempt (``adopt_stable``)
        self.stable: dict[str, Any] | None = copy.deepcopy(status.get("lastStableSpec")) or None
        upgrade = status.get("upgrade") or {}
        # the spec that failed its upgrade (its digest): while the object asks for it, the stable one runs
        self.rolled_back: str | None = upgrade.get("failedSpec") if upgrade.get("result") == "RolledBack" else None
        self.deadline: float | None = None
        self.policy = UpgradePolicy.of(spec or {})
        self.stop_requested_at: float | None = None  # an upgrade of a running attempt: when it was asked for
        self.trial = False  # the running attempt runs the spec on trial (not the one an upgrade is stopping)
        if spec is not None and self.stable is not None and self.state not in (CREATED, DEPLOYING) \
                and spec_digest(spec) not in (spec_digest(self.stable), self.rolled_back):
            self.state = UPGRADING  # changed while no operator watched (or before a standby took over)

    @_locked
    def adopt_stable(self, stable: Mapping[str, Any] | None, spec: Mapping[str, Any]) -> None:
        """The stable spec read from its ConfigMap (``stable.py``) after construction: what the constructor
        would have made of it, unless a spec change since already decided the state."""
        if stable is None or self.stable is not None:
            return
        self.stable = copy.deepcopy(dict(stable))
        if self.state not in (CREATED, DEPLOYING, UPGRADING) and \
                spec_digest(spec) not in (spec_digest(self.stable), self.rolled_back):
            self.state = UPGRADING

    # --- what the runner asks -----------------------------------------------------------------
    def is_upgrade(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return run_spec(old) != run_spec(new)

    @_locked
    def spec_to_run(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """The body an attempt runs: the object's, or, rolled back, the object with the last stable spec."""
        if self.stable is not None and self.rolled_back == spec_digest(body["spec"]):
            keep = {k: v for k, v in body["spec"].items() if k in NOT_UPGRADES}
            return {**body, "spec": {**copy.deepcopy(self.stable), **keep}}
        return body

    @_locked
    def changed(self, spec: Mapping[str, Any], running: bool) -> bool:
        """The spec changed in what runs. True: the running attempt should be stopped for it. With a stable
        spec to go back to, the change is on trial (Upgrading) whether or not a run was going on."""
        self.policy = UpgradePolicy.of(spec)
        if self.rolled_back == spec_digest(spec):  # back to the spec that failed: it stays rolled back
            return False
        self.rolled_back = None  # a new spec ends a rollback: it is tried
        self.state = UPGRADING if self.stable is not None else DEPLOYING
        self.deadline, self.trial = None, False
        if not running:
            return False
        self.stop_requested_at = self.clock()
        return True

    @_locked
    def stop_now(self, checkpoints: bool, last_committed_at: float | None) -> bool:
        """Whether a running attempt asked to stop for an upgrade stops now: at once when stateless or
        without checkpoints, once a checkpoint committed after the request (``last_committed_at``, on this
        clock), or once that has taken too long (the newest one serves)."""
        if self.stop_requested_at is None:
            return False
        since = self.clock() - self.stop_requested_at
        committed = last_committed_at is not None and last_committed_at >= self.stop_requested_at
        if self.policy.mode == "stateless" or not checkpoints or committed or since >= CHECKPOINT_WAIT_S:
            self.stop_requested_at = None
            return True
        return False

    @_locked
    def attempt_started(self, spec: Mapping[str, Any]) -> None:
        self.policy = UpgradePolicy.of(spec)
        self.stop_requested_at = None
        if self.state in (CREATED, SUSPENDED, SUCCEEDED, FAILED):
            self.state = DEPLOYING
        if self.state == UPGRADING and self.deadline is None:
            self.deadline = self.clock() + self.policy.health_deadline_s
        self.trial = True

    @_locked
    def committed(self, spec: Mapping[str, Any]) -> dict[str, Any] | None:
        """A step committed by an attempt running ``spec``: the status fields to write, if that made it stable."""
        if self.state not in (DEPLOYING, UPGRADING) or not self.trial:
            return None  # the old spec's steps, while it stops for an upgrade, prove nothing of the new one
        if self.rolled_back is not None:  # the stable spec runs in place of the one that failed
            self.state = ROLLED_BACK
            return {"lifecycleState": ROLLED_BACK}
        was, self.state, self.deadline = self.state, RUNNING, None
        self.stable = copy.deepcopy(run_spec(spec))  # the runner keeps it (``stable.py``) and names it in the status
        outcome = {"upgrade": {"result": "Upgraded", "failedSpec": None, "message": None}} if was == UPGRADING else {}
        return {"lifecycleState": RUNNING, **outcome}

    def _can_roll_back(self) -> bool:
        return self.stable is not None and self.policy.rollback and self.policy.mode != "stateless"

    @_locked
    def unhealthy(self) -> bool:
        """The upgraded spec's time to commit a step has passed, and there is a stable spec to go back to
        (without one the new spec keeps trying within its restart budget)."""
        return (self.state == UPGRADING and self._can_roll_back() and self.deadline is not None
                and self.clock() >= self.deadline)

    @_locked
    def roll_back(self, spec: Mapping[str, Any], why: str) -> dict[str, Any] | None:
        """The upgrade to ``spec`` (what the failed attempt ran) failed (``why``): the status fields of a
        rollback, or None when there is nothing to roll back to (no stable spec, rollback off, a stateless
        upgrade, which discarded the state a rollback would resume from): the failure is the pipeline's."""
        if self.state != UPGRADING or not self._can_roll_back():
            return None
        self.state, self.rolled_back, self.deadline = ROLLED_BACK, spec_digest(spec), None
        return {"lifecycleState": ROLLED_BACK,
                "upgrade": {"result": "RolledBack", "failedSpec": self.rolled_back, "message": why}}

    @_locked
    def ended(self, state: str) -> dict[str, Any]:
        """Suspended, succeeded or failed."""
        self.state = state
        return {"lifecycleState": state}
