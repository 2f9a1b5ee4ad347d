"""StatusReporter: coordinator reports become status patches (throttled) and Events."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ftpipeline.coordinator.recovery import RecoveryRecord
from ftpipeline.coordinator.trigger import Reason
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.spec.schema import CONDITIONS, PHASES
from ftpipeline_operator.status import StatusReporter, set_condition


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reporter() -> tuple[StatusReporter, list[dict[str, Any]], list[tuple[str, str, str]], Clock]:
    patches: list[dict[str, Any]] = []
    events: list[tuple[str, str, str]] = []
    clock = Clock()
    r = StatusReporter(patches.append, lambda *e: events.append(e), generation=4, clock=clock)
    return r, patches, events, clock


def cond(patch: dict[str, Any], kind: str) -> dict[str, Any]:
    [c] = [c for c in patch["conditions"] if c["type"] == kind]
    return c


def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    first = set_condition([], "Ready", True, "A", "a")
    again = set_condition(first, "Ready", True, "B", "b")
    assert again[0]["lastTransitionTime"] == first[0]["lastTransitionTime"]
    assert again[0]["reason"] == "B"
    flipped = set_condition([{**first[0], "lastTransitionTime": "2000-01-01T00:00:00Z"}], "Ready", False, "C", "c")
    assert flipped[0]["lastTransitionTime"] != "2000-01-01T00:00:00Z"


def test_step_progress_is_throttled_but_the_first_commit_is_not() -> None:
    r, patches, _, clock = reporter()
    r.on_workers_starting([WorkerId("w0"), WorkerId("w1")])
    assert patches[-1]["phase"] == "Starting" and patches[-1]["observedGeneration"] == 4
    r.on_step_committed(1, 10, 0.5)
    assert patches[-1]["phase"] == "Running" and cond(patches[-1], "Ready")["status"] == "True"
    n = len(patches)
    for step in range(2, 20):
        r.on_step_started(step, Reason.RECORDS, 10)
        r.on_step_committed(step, 10, 0.01)
    assert len(patches) == n, "within a second nothing more is sent"
    clock.now += 1.5
    r.on_step_committed(20, 10, 0.01)
    assert patches[-1]["committedStep"] == 20 and patches[-1]["step"] == 19


def test_a_recovery_is_an_event_and_shows_in_the_status_at_once() -> None:
    r, patches, events, _ = reporter()
    r.lost_reasons = {WorkerId("w1"): "OOMKilled in container spark: exit code 137"}
    r.on_worker_lost(WorkerId("w1"))
    assert patches[-1]["phase"] == "Recovering" and cond(patches[-1], "Degraded")["status"] == "True"
    record = RecoveryRecord(WorkerId("w1"), "lineage", 2, (), {}, detected_at=0.0, seconds=0.012)
    r.on_recovery(record)
    assert patches[-1]["recoveries"] == 1
    assert patches[-1]["lastRecovery"]["strategy"] == "lineage"
    assert patches[-1]["lastRecovery"]["reason"].startswith("OOMKilled")
    assert ("Normal", "Recovered") in {(k, reason) for k, reason, _ in events}


def test_stalled_once_per_stall_and_cleared_by_a_commit() -> None:
    r, patches, events, clock = reporter()
    r.on_step_committed(1, 10, 0.1)
    clock.now += 30
    r.check_progress(20)
    r.check_progress(20)
    assert [e[1] for e in events] == ["Stalled"]
    assert cond(patches[-1], "Stalled")["status"] == "True"
    r.on_step_committed(2, 10, 0.1)
    assert cond(patches[-1], "Stalled")["status"] == "False"


def test_a_failed_patch_is_sent_again_with_the_next_one() -> None:
    sent: list[dict[str, Any]] = []
    fail = [True]

    def patch(p: dict[str, Any]) -> None:
        if fail[0]:
            raise RuntimeError("API server unavailable")
        sent.append(p)

    r = StatusReporter(patch, lambda *e: None, generation=1)
    r.update(urgent=True, phase="Running")
    fail[0] = False
    r.update(urgent=True, committedStep=3)
    assert sent[-1]["phase"] == "Running" and sent[-1]["committedStep"] == 3


def test_ready_counts_what_is_there_and_degraded_clears_when_the_replacement_joins() -> None:
    r, patches, _, _ = reporter()
    r.total = 3
    r.on_workers_starting([WorkerId("w0"), WorkerId("w1"), WorkerId("w2")])
    for i in range(3):
        r.on_worker_joined(WorkerId(f"w{i}"), i + 1, 3)
    assert patches[-1]["workers"] == {"ready": 3, "total": 3}
    r.on_worker_lost(WorkerId("w1"))
    assert patches[-1]["workers"] == {"ready": 2, "total": 3}
    r.on_recovery(RecoveryRecord(WorkerId("w1"), "lineage", 2, (), {}, detected_at=0.0, seconds=0.01))
    assert patches[-1]["workers"] == {"ready": 2, "total": 3}
    assert cond(patches[-1], "Degraded")["reason"] == "AwaitingReplacement"
    r.on_worker_joined(WorkerId("w3"), 3, 3)  # the coordinator counts its members; the spec asks for 3
    assert patches[-1]["workers"] == {"ready": 3, "total": 3}
    assert cond(patches[-1], "Degraded")["status"] == "False"


def test_a_new_attempt_clears_the_failed_condition() -> None:
    r, patches, _, _ = reporter()
    r.condition("Failed", True, "RestartBudgetExhausted", "attempt 6 failed: ...")
    r.on_workers_starting([WorkerId("w0")])
    assert cond(patches[-1], "Failed")["status"] == "False"


def test_every_condition_and_phase_the_operator_writes_is_one_the_crd_accepts() -> None:
    """The API server refuses a whole status patch over one unknown enum value, and every later patch
    carries the same condition: the status would freeze (as it did once for Paused)."""
    source = "\n".join(p.read_text() for p in (Path(__file__).parents[3] / "operator").rglob("*.py"))
    conditions = set(re.findall(r'condition\((?:\w+, )?"([A-Za-z]+)"', source))
    phases = set(re.findall(r'(?:phase=|\.ended\()"([A-Za-z]+)"', source))
    assert {"Ready", "Paused", "Failed"} <= conditions and {"Running", "Failed"} <= phases  # the pattern still finds them
    assert conditions <= set(CONDITIONS), conditions - set(CONDITIONS)
    assert phases <= set(PHASES), phases - set(PHASES)


def test_an_outage_pauses_with_a_condition_and_events_the_crd_accepts() -> None:
    import jsonschema

    from ftpipeline.spec.schema import STATUS_SCHEMA

    r, patches, events, _ = reporter()
    r.on_control_plane("redis", False, "Redis unreachable")
    assert patches[-1]["phase"] == "Paused" and cond(patches[-1], "Paused")["status"] == "True"
    r.on_control_plane("redis", True, "Redis answers again")
    assert patches[-1]["phase"] == "Running" and cond(patches[-1], "Paused")["status"] == "False"
    assert [e[1] for e in events] == ["RedisUnavailable", "RedisRecovered"]
    r.on_control_plane("kafka", False, "kafka unreachable, the run is paused until it answers: sink out: _TRANSPORT")
    assert patches[-1]["phase"] == "Paused" and cond(patches[-1], "Paused")["reason"] == "KafkaUnavailable"
    assert events[-1][:2] == ("Warning", "KafkaUnavailable")
    for patch in patches:
        jsonschema.validate(patch, STATUS_SCHEMA)


def test_an_aborted_checkpoint_is_a_warning_and_a_condition_until_one_commits() -> None:
    r, patches, events, _ = reporter()
    r.on_step_committed(1, 10, 0.5)
    r.on_checkpoint_aborted(3, "worker w1 could not write to checkpoint storage: Not a directory: '/data/ck'")
    assert events[-1] == ("Warning", "CheckpointAborted",
                          "checkpoint 3 aborted: worker w1 could not write to checkpoint storage: Not a directory: '/data/ck'")
    failing = cond(patches[-1], "CheckpointFailing")
    assert failing["status"] == "True" and failing["reason"] == "CheckpointAborted" and "/data/ck" in failing["message"]
    r.on_checkpoint({"epoch": 4, "boundary": 6, "seconds": 0.5, "bytes": 100})
    assert cond(patches[-1], "CheckpointFailing")["status"] == "False"


def test_every_recovery_strategy_the_coordinator_records_is_one_the_crd_accepts() -> None:
    """A start-over of a pipeline whose every worker was lost records "restart": refused by the schema,
    that one field froze the whole status at Starting while the Events said Failed."""
    from ftpipeline.spec.schema import STATUS_SCHEMA

    source = "\n".join(p.read_text() for p in (Path(__file__).parents[3] / "runtime" / "ftpipeline" / "coordinator")
                       .rglob("*.py"))
    recorded = set(re.findall(r'strategy="([a-z]+)"', source))
    assert {"lineage", "checkpoint", "restart"} <= recorded  # the pattern still finds them
    allowed = set(STATUS_SCHEMA["properties"]["lastRecovery"]["properties"]["strategy"]["enum"])
    assert recorded <= allowed, recorded - allowed


def test_a_status_the_crd_refuses_still_lands_its_phase() -> None:
    from kubernetes.client.exceptions import ApiException

    sent: list[dict[str, Any]] = []

    def patch(p: dict[str, Any]) -> None:
        if "lastRecovery" in p:
            raise ApiException(status=422, reason="Unprocessable Entity")
        sent.append(p)

    r = StatusReporter(patch, lambda *e: None, generation=1)
    r.update(urgent=True, phase="Recovering", lastRecovery={"strategy": "unheard-of"})
    assert sent[-1]["phase"] == "Recovering" and "lastRecovery" not in sent[-1]
    r.update(urgent=True, phase="Failed", message="restart budget spent")
    assert sent[-1]["phase"] == "Failed", "the refused field is not carried into later patches"


def test_a_generation_the_running_attempt_takes_in_is_observed_at_once_and_never_goes_back() -> None:
    r, patches, _, clock = reporter()
    r.on_step_committed(1, 10, 0.5)
    n = len(patches)
    r.observe(5)  # within the throttle's second: sent anyway
    assert len(patches) == n + 1 and patches[-1]["observedGeneration"] == 5
    r.observe(5)
    r.observe(3)
    assert len(patches) == n + 1 and r.generation == 5


def _conditions(patch: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in patch["conditions"]}


def _running(r: StatusReporter, clock: Clock, steps: int) -> None:
    r.total = 3
    r.on_workers_starting([WorkerId("w0"), WorkerId("w1"), WorkerId("w2")])
    for i, w in enumerate(("w0", "w1", "w2")):
        r.on_worker_joined(WorkerId(w), i + 1, 3)
    r.on_worker_lost(WorkerId("w2"))  # Degraded while running
    for step in range(1, steps + 1):
        clock.now += 0.4
        r.on_step_committed(step, 10, 0.01)
    r.flush()


def test_each_phase_sets_every_condition_to_what_is_true_then() -> None:
    """While running, Progressing names the newest step committed (not the first); once the run ends, no
    condition still says it is ready, degraded by a lost worker, progressing or stalled."""
    import jsonschema

    from ftpipeline.spec.schema import STATUS_SCHEMA

    r, patches, _, clock = reporter()
    _running(r, clock, 300)
    running = _conditions(patches[-1])
    assert running["Ready"] == ("True", "StepsCommitting") and running["Degraded"][0] == "True"
    assert cond(patches[-1], "Progressing")["message"] == "step 300 committed"
    expected = {
        "Succeeded": {"Ready": ("False", "Succeeded"), "Progressing": ("False", "Succeeded"),
                      "Stalled": ("False", "Succeeded"), "Degraded": ("False", "NotRunning"),
                      "Failed": ("False", "Succeeded")},
        "Failed": {"Ready": ("False", "RestartBudgetExhausted"), "Progressing": ("False", "RestartBudgetExhausted"),
                   "Stalled": ("False", "RestartBudgetExhausted"), "Degraded": ("False", "NotRunning"),
                   "Failed": ("True", "RestartBudgetExhausted")},
        "Suspended": {"Ready": ("False", "Suspended"), "Progressing": ("False", "Suspended"),
                      "Stalled": ("False", "Suspended"), "Degraded": ("False", "NotRunning"),
                      "Failed": ("False", "Suspended")},
        "Retrying": {"Ready": ("False", "RunFailed"), "Progressing": ("False", "RunFailed"),
                     "Stalled": ("False", "RunFailed"), "Degraded": ("False", "NotRunning"),
                     "Failed": ("False", "RunFailed")},
    }
    for phase, want in expected.items():
        r, patches, _, clock = reporter()
        _running(r, clock, 5)
        reason = want["Failed"][1]
        r.ended(phase, reason, "attempt 3 failed: boom" if phase in ("Failed", "Retrying") else "")
        last = patches[-1]
        assert last["phase"] == phase and _conditions(last) == want, (phase, _conditions(last))
        assert last["workers"] == {"ready": 0, "total": 3}
        assert (last["message"] != "") == (phase in ("Failed", "Retrying"))
        jsonschema.validate(last, STATUS_SCHEMA)


def test_event_time_going_wrong_is_a_warning_event_and_a_condition() -> None:
    """A stage's late share above 1%, a watermark held back (``eventtime/watch.py``): each a Warning Event
    with its own reason, and the EventTimeDegraded condition saying the newest."""
    r, patches, events, _ = reporter()
    r.on_event_time("late-share", "per-minute", "stage 'per-minute': 30 of the 1,000 rows it took were late (3.0%)")
    r.on_event_time("held-back", "views.1", "source channel views.1 has held the watermark back for 10 steps")
    assert [e[:2] for e in events] == [("Warning", "LateRecords"), ("Warning", "WatermarkHeldBack")]
    degraded = cond(patches[-1], "EventTimeDegraded")
    assert degraded["status"] == "True" and degraded["reason"] == "WatermarkHeldBack" and "views.1" in degraded["message"]
