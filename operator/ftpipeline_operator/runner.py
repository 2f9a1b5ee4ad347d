"""One coordinator per FTPipeline, run by the operator: the same coordinator as ``ftpipeline run``.

Each pipeline's Kopf daemon (``slots.py``) calls :meth:`PipelineRunner.attempt`
on a coordinator thread, and between attempts waits holding none. An attempt
validates the pipeline (the parts a structural schema cannot check), opens
the run (``coordinator/session.py``) and runs the coordinator with workers as
pods (``cluster.py``), reporting through ``status.py``. What changes a run
from outside reaches it through :meth:`update_body`, which only records the
new body: the objects the pipeline owns are written by the next attempt
(``publish``), off Kopf's handler executor, so a pod always reads the
document of the run it belongs to:

    PENDING --a coordinator thread free--> PUBLISHING (the pipeline's ConfigMap, Service, NetworkPolicy)
    PUBLISHING --spec.suspend--> SUSPENDED
    PUBLISHING --> STARTING --workers joined--> RUNNING
    RUNNING --pod lost--> RECOVERING --recovered--> RUNNING
    RUNNING --maxSteps committed or input ended--> SUCCEEDED (thread given back)
    RUNNING --spec.suspend--> SUSPENDED (thread given back) --suspend cleared--> STARTING (resumed)
    RUNNING --spec.restartNonce changed--> STARTING (resumed on fresh pods)
    RUNNING --spec.restoreFrom names a committed checkpoint of its own--> STARTING resumed from it, the later
            checkpoints deleted (``restores.py``); any other name is refused in the status, the run untouched
    RUNNING --an FTPipelineCheckpoint asked for one--> a checkpoint, recorded in its object (``snapshots.py``)
    RUNNING --any other change to what runs (an upgrade, ``upgrades.py``)--> a checkpoint, then STARTING
            with the new spec from it; RolledBack to the last stable spec if it commits no step in time
    any     --the run failed, restart budget left--> RETRYING --backoff (no thread)--> STARTING (resumed)
    any     --the run failed, budget spent / a spec that cannot run--> FAILED --spec changed--> STARTING
    STARTING --a fresh run's sink holds output, existingOutput: fail--> FAILED (ExistingOutput; nothing touched)
    RUNNING --another coordinator claimed the command log--> (stops touching nothing: the new one owns it)
    any     --daemon stopped (deletion, operator exit or pause)--> (pods kept on exit, resumed by the next operator)
    SUCCEEDED, FAILED --an operator starts (restart, upgrade, handover)--> the same, untouched: no attempt, no
            pod, no restart budget, until the spec changes (status.observedGeneration is the generation that
            ended); only a run that was in progress is taken over or resumed

What counts as a failed attempt and how long to wait is ``attempts.py``.
Status and Events carry one line naming the cause (the path, the errno, the
worker); tracebacks go to the operator's log only.

Every (re)start after the first is a *resume*: Feldera's start-up — open the
newest checkpoint every worker has and replay later steps from the step
log; the exactly-once barrier drops what was already released. An operator
that restarts (or a standby that takes over) finds the previous run's pods:
it takes them over when they are whole and alike (``pods.py``), and they
reopen the newest checkpoint in place; otherwise it deletes them and starts
new ones. Either way its claim of the command log fences the previous
coordinator off, if it still runs.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ftpipeline.coordinator.coordinator import Coordinator, Interrupted, PipelineFailed
from ftpipeline.coordinator.errors import CannotRun, ExistingOutputFound, RestoreRefused, Superseded
from ftpipeline.coordinator.recovery import RecoveryRecord
from ftpipeline.coordinator.session import open_session
from ftpipeline.obs.errors import one_line
from ftpipeline.obs.metrics import RunMetrics
from ftpipeline.spec.load import SpecError
from ftpipeline.spec.model import PipelineSpec
from ftpipeline.spec.schema import API_GROUP, API_VERSION, PLURAL
from ftpipeline_operator import render
from ftpipeline_operator.policy import problems as policy_problems
from ftpipeline_operator.attempts import Attempts, Verdict, policy_of
from ftpipeline_operator.credentials import issue as issue_credentials
from ftpipeline_operator.cluster import KubernetesCluster
from ftpipeline_operator.objectstores import issue as issue_object_store
from ftpipeline_operator.stores import issue as issue_store_users
from ftpipeline_operator.stores import store_cas, uses_default_redis, uses_default_zookeeper
from ftpipeline_operator.status import StatusReporter, api_message, now_iso
from ftpipeline_operator.pods import check_pod, delete_stale_pods, pods_to_keep
from ftpipeline_operator.resolve import Defaults, Unrunnable, checkpoints_off_warning, resolve_spec
from ftpipeline_operator.restores import Refused, Restore, asked, done_in, resolve
from ftpipeline_operator.snapshots import PostEvent, Snapshots
from ftpipeline_operator import stable as stable_spec
from ftpipeline_operator.upgrades import FAILED, RUNNING, SUCCEEDED, SUSPENDED, TAKEN_IN, Upgrades, spec_digest

log = logging.getLogger("ftpipeline.operator.runner")


class Stopped(Protocol):
    """Kopf's daemon stop flag (a ``kopf.DaemonStopped``)."""

    def __bool__(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> Any: ...


@dataclass(frozen=True)
class Rest:
    """What a pipeline's daemon waits for after an attempt, holding no thread."""

    retry_in: float | None = None   # seconds of backoff before the next attempt
    for_change: bool = False        # a spec change (or a stop)
    gone: bool = False              # nothing: the daemon ends (another coordinator owns the pipeline)

    NONE: ClassVar[Rest]
    CHANGE: ClassVar[Rest]
    GONE: ClassVar[Rest]


Rest.NONE, Rest.CHANGE, Rest.GONE = Rest(), Rest(for_change=True), Rest(gone=True)


UNHEALTHY = "the upgraded spec committed no step in time"


ENDED = ("Succeeded", "Failed")


def ended_before(body: Mapping[str, Any]) -> str | None:
    """The phase a pipeline ended in (Succeeded or Failed) when that is the verdict on the spec it has now: the
    status was written for this generation. A spec changed since (a restart nonce too) runs again."""
    status = body.get("status") or {}
    phase = status.get("phase")
    generation = body["metadata"].get("generation")
    if phase in ENDED and generation is not None and status.get("observedGeneration") == generation:
        return str(phase)
    return None


class PipelineRunner:
    def __init__(self, key: tuple[str, str], core: client.CoreV1Api, custom: client.CustomObjectsApi,
                 defaults: Defaults, metrics_registry: Any, post_event: Callable[[str, str, str], None],
                 publish: Callable[[Mapping[str, Any]], None] = lambda body: None,
                 post_object_event: PostEvent = lambda obj, kind, reason, message: None) -> None:
        self.namespace, self.name = key
        self.publish = publish  # writes the objects the pipeline owns (ConfigMap, Service, NetworkPolicy)
        self.core = core
        self.custom = custom
        self.defaults = defaults
        self.registry = metrics_registry
        self.post_event = post_event
        self.body: Mapping[str, Any] = {}      # the object as last seen
        self.run_body: Mapping[str, Any] = {}  # what the attempt runs: the object, or its last stable spec
        self.upgrades = Upgrades({}, time.monotonic)  # the lifecycle (upgrades.py), from the first body's status
        self._upgrade_stop = False             # stop the running attempt for an upgrade (once checkpointed)
        self._upgrade_ckpt_asked = False
        self._start_fresh = False              # a stateless upgrade: attempts are new runs until a step commits
        self._in_attempt = False               # an attempt runs ``run_body`` (a change must stop it)
        self.cluster: KubernetesCluster | None = None
        self.reporter: StatusReporter | None = None
        self._stop_reason: str | None = None
        self._absorbed: int | None = None  # the newest generation the running attempt takes in without stopping
        self._checkpoint_now = threading.Event()
        self._changed = threading.Event()
        self.ran_before = False  # from the first body's status, then set by each run
        self.attempts: Attempts | None = None
        self.on_change: Callable[[], None] = lambda: None  # set by the pipeline's daemon (slots.py)
        self.snapshots = Snapshots(self.namespace, self.name, custom, post_object_event)  # FTPipelineCheckpoints
        self._restored: tuple[str, str] | None = None  # the spec.restoreFrom done last (status.lastRestore)
        self.resting = False  # succeeded, failed or suspended: no attempt until the spec changes
        self._ended: str | None = None  # Succeeded/Failed with the spec it has now: no attempt until it changes
        self._stable_unread = False  # status.stableSpec names a ConfigMap not read yet (read on the attempt thread)
        self._migrate_stable = False  # an older operator's status.lastStableSpec: moved to the ConfigMap at a commit
        self._progress_mark = 0  # the newest step committed: a step past it is progress (replays are not)
        self._first_lock = threading.Lock()
        self._logged_ended = False
        self._restore_asked = threading.Event()

    # --- from the handlers -------------------------------------------------
    def update_body(self, body: Mapping[str, Any]) -> None:
        """A newer FTPipeline. Only a new generation (a spec change) acts on the run."""
        old = self.body.get("spec", {}) if self.body else {}
        changed = bool(self.body) and body["metadata"].get("generation") != self.body["metadata"].get("generation")
        with self._first_lock:  # Kopf's handler thread and the pipeline's daemon may both bring the first body
            if not self.body:  # the first this runner sees: has the pipeline run before (this operator or another)?
                status = body.get("status") or {}
                self.ran_before = bool(status.get("committedStep"))
                self._progress_mark = int(status.get("committedStep") or 0)
                self.upgrades = Upgrades(status, time.monotonic, body["spec"])  # the ConfigMap's spec: attempt()
                self._stable_unread = bool(status.get("stableSpec"))
                self._migrate_stable = bool(status.get("lastStableSpec")) and not status.get("stableSpec")
                self._restored = done_in(status)
                self._ended = ended_before(body)
                self.resting = self._ended is not None
            self.body = body
        if not changed:
            return
        self._ended = None
        new = body["spec"]
        if self.upgrades.is_upgrade(old, new) and self.upgrades.changed(new, running=self._in_attempt):
            self._upgrade_stop = True
        if new.get("suspend") and not old.get("suspend"):
            self._stop_reason = "suspended"
        if new.get("restartNonce") != old.get("restartNonce"):
            self._stop_reason = "restart requested"
        if new.get("restoreFrom") != old.get("restoreFrom"):
            self._restore_asked.set()  # checked by the running attempt before it stops for it
        if new.get("checkpointNonce") != old.get("checkpointNonce"):
            self._checkpoint_now.set()
        if self._in_attempt and not self._upgrade_stop and self._stop_reason is None and \
                {k for k in {*old, *new} if old.get(k) != new.get(k)} <= TAKEN_IN:
            self._absorbed = int(body["metadata"]["generation"])
        self._changed.set()
        self.on_change()

    @property
    def changed(self) -> bool:
        return self._changed.is_set()

    @property
    def ended(self) -> bool:
        """Succeeded or Failed with the spec it has now: the daemon waits for a change, taking no slot."""
        return self._ended is not None and not self._changed.is_set()

    def pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        if self.cluster is not None:
            self.cluster.on_pod_event(kind, pod)

    # --- the daemon ----------------------------------------------------------
    def patch_status(self, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            API_GROUP, API_VERSION, self.namespace, PLURAL, self.name, {"status": patch})

    def _reporter(self) -> StatusReporter:
        status = self.body.get("status") or {}
        reporter = StatusReporter(self.patch_status, self.post_event, self.body["metadata"].get("generation"),
                                  status.get("conditions"))
        reporter.recoveries = int(status.get("recoveries") or 0)
        reporter.committed_step = int(status.get("committedStep") or 0)
        reporter.total = int(self.body["spec"].get("workers") or 0)
        return reporter

    def stay_ended(self) -> Rest:
        """Succeeded or Failed with the spec it has now (under this operator or an earlier one): it stays so."""
        log.info("the pipeline ended before this operator started: it stays so until its spec changes"
                 if not self._logged_ended else "the pipeline ended: it stays so until its spec changes",
                 extra={"pipeline": self.name, "phase": self._ended})
        self._logged_ended = True
        self.resting = True
        return Rest.CHANGE

    def attempt(self, stopped: Stopped) -> Rest:
        """One turn of the state machine above, on a coordinator thread (``slots.py``): report a suspended
        pipeline, or run the pipeline until it ends, fails or is stopped; then say what to wait for
        before the next turn. No thread is held while waiting."""
        if self.ended:
            return self.stay_ended()
        changed = self._changed.is_set()
        self._changed.clear()
        self._stop_reason = self._absorbed = None
        self.resting = False
        if self._stable_unread:  # an API call: here, on the attempt's thread, not on Kopf's loop
            self._stable_unread = False
            self.upgrades.adopt_stable(stable_spec.read(self.core, self.body), self.body["spec"])
        if self.attempts is None or changed:  # a new spec starts its budget over
            self.attempts = Attempts(policy_of(self.body["spec"]), time.monotonic)
        reporter = self.reporter = self._reporter()
        self._upgrade_stop = self._upgrade_ckpt_asked = False
        if self.upgrades.unhealthy():  # retried past the upgrade's deadline without a committed step
            rest = self._roll_back(reporter, "no step committed within spec.upgrade.healthDeadlineSeconds")
            if rest is not None:
                return rest
        self.run_body = self.upgrades.spec_to_run(self.body)  # from here on a spec change stops this attempt
        self._in_attempt = True
        try:
            rest = self._attempt(stopped, reporter)
        finally:
            self._in_attempt = False
        self.resting = rest.for_change
        if rest.for_change and self._absorbed is not None and \
                self._absorbed == self.body["metadata"].get("generation"):
            self._changed.clear()  # the run took that change in (a checkpoint nonce): nothing new to run
        if rest.for_change:  # ended: no run takes the checkpoints asked for
            self.snapshots.failed("the pipeline stopped (succeeded, failed or suspended) before the checkpoint "
                                  "was taken", ended=True)
        else:
            self.snapshots.interrupted()
        return rest

    def _attempt(self, stopped: Stopped, reporter: StatusReporter) -> Rest:
        assert self.attempts is not None
        try:
            self.publish(self.run_body)  # this attempt's document, before any pod reads it
            if self.run_body["spec"].get("suspend"):
                reporter.ended("Suspended", "Suspended", "spec.suspend is true", **self.upgrades.ended(SUSPENDED))
                return Rest.CHANGE
            self.upgrades.attempt_started(self.run_body["spec"])
            # the phase moves off an ended one at once: an operator that dies now must not find it ended
            reporter.update(urgent=True, phase="Starting", message="", attempt=self.attempts.attempt,
                            lifecycleState=self.upgrades.state)
            outcome = self._run_once(stopped, reporter)
        except (SpecError, Unrunnable, CannotRun) as exc:  # a spec the CRD cannot judge: retrying cannot help
            cause = "; ".join(map(str, exc.problems)) if isinstance(exc, SpecError) else str(exc)
            verdict = self.attempts.fatal(one_line(cause if isinstance(exc, CannotRun) else f"invalid spec: {cause}"))
            rest = self._roll_back(reporter, verdict.message)
            if rest is None:
                self._give_up(reporter, "Rejected", verdict)
            return rest or Rest.CHANGE
        except ExistingOutputFound as exc:  # nothing was touched: the next attempt is a fresh run again
            self.ran_before = False
            self._give_up(reporter, "ExistingOutput", self.attempts.fatal(one_line(str(exc))))
            return Rest.CHANGE
        except Superseded as exc:  # another coordinator owns the pipeline now: hands off, report nothing
            log.warning("another coordinator claimed the pipeline: this one stops",
                        extra={"pipeline": self.name, "error": str(exc)})
            return Rest.GONE
        except Exception as exc:  # a task failed; storage, Redis, ZooKeeper or the API server unreachable
            cause = (str(exc) if isinstance(exc, PipelineFailed) else
                     f"the API server answered {exc.status}: {api_message(exc)}" if isinstance(exc, ApiException)
                     else one_line(exc))
            log.error("run failed", exc_info=not isinstance(exc, PipelineFailed),
                      extra={"pipeline": self.name, "error": cause})
            verdict = self.attempts.failed(one_line(cause))
            if verdict.retry_in is None:
                rest = self._roll_back(reporter, verdict.message)
                if rest is None:
                    self._give_up(reporter, "RestartBudgetExhausted", verdict)
                return rest or Rest.CHANGE
            reporter.ended("Retrying", "RunFailed", verdict.message,
                           lastFailure={"attempt": verdict.attempt, "message": one_line(cause), "time": now_iso()})
            reporter.event("Warning", "RunFailed", verdict.message)
            return Rest(retry_in=verdict.retry_in)
        if outcome == "done":
            n = reporter.recoveries
            done = f"every step committed (step {reporter.committed_step}; {n} recover{'y' if n == 1 else 'ies'})"
            reporter.ended("Succeeded", "Succeeded", done, **self.upgrades.ended(SUCCEEDED))
            self._ended, self._logged_ended = "Succeeded", True
            reporter.event("Normal", "Succeeded", done)
            return Rest.CHANGE
        if outcome == "unhealthy":
            return self._roll_back(reporter, "no step committed within spec.upgrade.healthDeadlineSeconds") \
                or Rest.NONE
        return Rest.NONE

    def _roll_back(self, reporter: StatusReporter, why: str) -> Rest | None:
        """The upgraded spec failed (``why``): the last stable spec runs again, resumed from the same
        checkpoint (``upgrades.py``). None: nothing to roll back to (the failure is the pipeline's)."""
        fields = self.upgrades.roll_back(self.run_body["spec"], why)  # the spec that failed, not a newer one
        if fields is None:
            return None
        message = f"the upgrade to generation {self.body['metadata'].get('generation')} failed ({why}): " \
                  "the last stable spec runs again from the newest checkpoint"
        self.attempts = Attempts(policy_of(self.body["spec"]), time.monotonic)  # the stable spec's own budget
        self._start_fresh = False
        reporter.ended("Retrying", "RolledBack", message, **fields)
        reporter.event("Warning", "RolledBack", message)
        log.error("upgrade rolled back", extra={"pipeline": self.name, "error": why})
        return Rest.NONE

    def waiting_for_slot(self, running: int) -> None:
        """Every coordinator thread is taken: say so in the status until one is free."""
        message = (f"waiting for a coordinator: all {running} are running pipelines "
                   f"(the operator's maxRunningPipelines)")
        self._reporter().update(urgent=True, phase="Pending", message=message)

    def _give_up(self, reporter: StatusReporter, reason: str, verdict: Verdict) -> None:
        """Failed, with one line naming the cause; a changed spec starts over."""
        self._ended, self._logged_ended = "Failed", True
        reporter.ended("Failed", reason, verdict.message,
                       lastFailure={"attempt": verdict.attempt, "message": verdict.message, "time": now_iso()},
                       **self.upgrades.ended(FAILED))
        reporter.event("Warning", reason, verdict.message)
        log.error("pipeline failed", extra={"pipeline": self.name, "reason": reason, "error": verdict.message})

    def _own_store_users(self, spec: PipelineSpec, stopped: Stopped) -> tuple[PipelineSpec, dict[str, str]]:
        """The spec with the pipeline's own Redis user and ZooKeeper identity in place of the operator's
        (``stores.py``), and where its pods read them and its keys to the operator's object store
        (``objectstores.py``)."""
        pods: dict[str, str] = {}
        object_store = issue_object_store(self.core, self.run_body, spec, self.defaults.object_store)
        if object_store is not None:
            pods["objectStoreSecret"] = object_store
        redis_admin = spec.redis_url if self.defaults.redis_users and uses_default_redis(self.run_body) else None
        zk_admin = spec.zookeeper if self.defaults.zookeeper_users and uses_default_zookeeper(self.run_body) else None
        if not redis_admin and not zk_admin:
            return spec, pods

        def between() -> None:
            if stopped:
                raise Interrupted("operator stopping")

        redis_url, zookeeper = issue_store_users(self.core, self.run_body, spec.store_key, redis_admin, zk_admin, between)
        secret = render.store_secret_name(self.name)
        if redis_url:
            spec, pods["redisSecret"] = replace(spec, redis_url=redis_url), secret
        if zookeeper:
            spec, pods["zookeeperSecret"] = replace(spec, zookeeper=zookeeper), secret
        return spec, pods

    def _run_once(self, stopped: Stopped, reporter: StatusReporter) -> str:
        spec = resolve_spec(self.run_body, self.core, self.defaults)
        refused = policy_problems(self.run_body["spec"], self.defaults.policy)  # stored while the webhook was off
        if refused:
            raise SpecError(f"ftpipeline {self.namespace}/{self.name}", refused)
        spec, own_stores = self._own_store_users(spec, stopped)
        check_pod(self.core, self.run_body, "", self._pod_defaults("", ""))
        metrics = RunMetrics(spec.metrics_label, self.registry)
        warning = checkpoints_off_warning(self.run_body["spec"], spec)
        if warning:
            reporter.event("Warning", "CheckpointsOff", warning)
        self._restore_asked.clear()  # this attempt does what spec.restoreFrom says now
        restore = self._restore(reporter)
        if restore is not None:  # written first: an operator that restarts before it is done does not do it twice
            reporter.update(urgent=True, **restore.status("Restoring"))
        fresh = self._start_fresh and restore is None  # a stateless upgrade starts over (until a step commits)
        resume = (self.ran_before or restore is not None) and not fresh
        # the pods' endpoints are the session's, which are the spec's (the operator always gives addresses)
        defaults = {**self._pod_defaults(spec.redis_url or "", (spec.zookeeper or "") if spec.needs_zookeeper else ""),
                    **own_stores}
        keep = pods_to_keep(self.core, self.run_body, defaults, spec.workers) if resume else None
        if keep is None:
            run, running = uuid.uuid4().hex[:8], []
            delete_stale_pods(self.core, self.namespace, self.name, run)
            credentials = issue_credentials(self.core, self.run_body, spec.store_key)  # one brought is checked first
        else:
            run, credentials, running = keep.run, keep.credentials, keep.workers  # the coordinator checks them
        session = open_session(spec, resume, private_dir=None, resume_if_started=not fresh)
        resuming = session.resuming
        self.ran_before = True  # from here on the pipeline's state is this run's: a retry resumes it
        cluster = self.cluster = KubernetesCluster(self.core, self.run_body, run, defaults, running=running)
        cluster.credentials = credentials
        reporter.lost_reasons = cluster.diagnoses  # set before the loss is queued: the reason is always there
        reporter.on_recovered = lambda record: self._recovered(metrics, cluster, record)
        reporter.on_checkpointed = lambda info: self.snapshots.committed(info, str(self.body["metadata"].get("uid")))
        reporter.on_checkpoint_failed = self.snapshots.failed

        def should_stop() -> str | None:
            if stopped:
                return "operator stopping"
            if coordinator.ckpt.pointer is None and self.snapshots.waiting:  # it would wait forever
                self.snapshots.failed("the pipeline takes no checkpoints (no ZooKeeper to commit them in)",
                                      ended=True)
            if self._absorbed is not None:
                reporter.observe(self._absorbed)
            if self._checkpoint_now.is_set() or self.snapshots.due():
                self._checkpoint_now.clear()
                coordinator.ckpt.requested = True
            if restore is not None and self._restored != (restore.checkpoint, restore.nonce) and \
                    coordinator.ckpt.last is not None and int(coordinator.ckpt.last["epoch"]) == restore.epoch:
                self._restore_done(reporter, restore, "Restored")
            if self._restore_asked.is_set():  # a refused restore is reported without stopping the run
                self._restore_asked.clear()
                if self._restore(reporter) is not None:
                    return "restore requested"
            upgrade = self._upgrade_step(coordinator, reporter)
            if upgrade:
                return upgrade
            reporter.check_progress(spec.progress_deadline_s)
            metrics.stalled.set(1 if reporter.stalled else 0)
            return self._stop_reason

        coordinator = Coordinator(spec, session.store, session.tables, cluster, reporter, metrics=metrics,
                                  pointer=session.pointer, commands=session.commands, resume=resuming,
                                  should_stop=should_stop, resume_epoch=restore.epoch if restore else None,
                                  stall_timeout_s=float("inf"))
        coordinator.ckpt.pinned = self.snapshots.pinned_epochs  # asked for by name: kept until deleted
        coordinator.ckpt.discard_newer = restore is not None
        keep_pods = False
        try:
            coordinator.run()
            return "done"
        except Superseded:
            keep_pods = True  # the coordinator that claimed the pipeline replaces them
            raise
        except RestoreRefused as exc:  # before anything was touched: the next attempt resumes as usual
            assert restore is not None
            self._restore_done(reporter, restore, "Refused", str(exc))
            return "interrupted"
        except Interrupted as exc:
            log.info("run interrupted", extra={"pipeline": self.name, "reason": str(exc)})
            keep_pods = bool(stopped)  # the operator is exiting: leave the pods for the next one to replace
            return "unhealthy" if str(exc) == UNHEALTHY else "interrupted"
        finally:
            reporter.flush()
            coordinator.shutdown(workers=not keep_pods)
            if not keep_pods:
                cluster.stop()
            session.close()
            self.cluster = None

    def _restore(self, reporter: StatusReporter) -> Restore | None:
        """The checkpoint ``spec.restoreFrom`` asks this attempt to resume from (``restores.py``), if any."""
        want = asked(self.body, self._restored)
        if want is None:
            return None
        try:
            return resolve(self.custom, self.body, want)
        except Refused as exc:
            self._restore_done(reporter, want, "Refused", str(exc))
            return None

    def _restore_done(self, reporter: StatusReporter, restore: Restore, result: str, message: str = "") -> None:
        self._restored = (restore.checkpoint, restore.nonce)
        if result == "Restored":
            self.snapshots.discarded_after(restore.epoch, f"deleted by the restore of {self.name} from checkpoint "
                                                          f"{restore.epoch} ({restore.checkpoint})")
            reporter.event("Normal", "Restored", f"resumed from checkpoint {restore.epoch} ({restore.checkpoint}, "
                                                 f"step {restore.step}); later checkpoints were deleted")
        else:
            reporter.event("Warning", "RestoreRefused", f"{message}: the pipeline goes on from its newest checkpoint")
            log.error("restore refused", extra={"pipeline": self.name, "error": message})
        reporter.update(urgent=True, **restore.status(result, message))

    def _upgrade_step(self, coordinator: Coordinator, reporter: StatusReporter) -> str | None:
        """The lifecycle's part of each coordinator turn (``upgrades.py``): a step committed makes this spec
        stable; an upgrade asked for stops the run once its checkpoint is in (stateless: at once); an
        upgraded spec that commits nothing in time stops to be rolled back."""
        if reporter.commits:
            self._start_fresh = False
            if reporter.committed_step > self._progress_mark:  # a new step, not one replayed after a resume
                self._progress_mark = reporter.committed_step
                if self.attempts is not None:
                    self.attempts.progressed()
            fields = self.upgrades.committed(self.run_body["spec"])
            newly_stable = fields is not None and fields["lifecycleState"] == RUNNING
            if (newly_stable or self._migrate_stable) and self.upgrades.stable is not None:
                self._migrate_stable = False
                fields = fields or {}
                if stable_spec.write(self.core, self.run_body, self.upgrades.stable):  # named once it is there
                    fields.update(stable_spec.status_fields(self.run_body, spec_digest(self.upgrades.stable)))
            if fields:
                reporter.update(urgent=True, **fields)
                if fields.get("upgrade"):
                    reporter.event("Normal", "Upgraded", f"generation {self.body['metadata'].get('generation')} "
                                                         f"committed step {coordinator.committed}")
        if self._upgrade_stop:
            spec = coordinator.spec  # without checkpoints the new spec resumes from the step log alone
            checkpoints = coordinator.ckpt.pointer is not None and bool(spec.checkpoint_steps or spec.checkpoint_ms)
            if checkpoints and self.upgrades.policy.mode == "checkpoint" and not self._upgrade_ckpt_asked:
                coordinator.ckpt.requested = self._upgrade_ckpt_asked = True
                reporter.update(urgent=True, lifecycleState=self.upgrades.state,
                                message="upgrading: taking a checkpoint, then stopping")
            if self.upgrades.stop_now(checkpoints, coordinator.ckpt.last_committed_at):
                self._upgrade_stop = self._upgrade_ckpt_asked = False
                self._start_fresh = self.upgrades.policy.mode == "stateless"
                return "upgrade"
        if self.upgrades.unhealthy():
            return UNHEALTHY
        return None

    def _recovered(self, metrics: RunMetrics, cluster: KubernetesCluster, record: RecoveryRecord) -> None:
        """How long from the pod event to the recovery plan applied (the operator's promise: < 1 s)."""
        event_at = cluster.event_at.get(record.worker)
        if event_at is not None:
            latency = record.detected_at - event_at + record.seconds
            metrics.recovery_start.observe(latency)
            log.info("recovery applied", extra={"pipeline": self.name, "worker": record.worker,
                                                "seconds_since_event": round(latency, 4)})

    def _pod_defaults(self, redis_url: str, zookeeper: str) -> dict[str, str]:
        return {"redis": redis_url, "zookeeper": zookeeper, "image": self.defaults.image,
                "pullPolicy": self.defaults.image_pull_policy, "storeCAs": ",".join(store_cas())}
