"""Why a worker pod is gone: the classification shown in Events, status and metrics.

The coordinator needs only "this worker is lost"; people need to know why,
because the remedy differs: an OOMKilled worker wants more memory, an image
that cannot be pulled wants a fixed ``spec.image``, an evicted or preempted
pod wants nothing (it is replaced), and an application error is a bug in the
pipeline's code. A worker's containers never exit on their own while the
pipeline runs, so an exit — even with code 0 — is a failure, never
"completed".

Pure functions over the pod as the API returns it (a dict), so they are
tested on hand-written pods.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ftpipeline.obs.errors import one_line
from ftpipeline.worker import exits


class Failure(str, enum.Enum):
    DELETED = "Deleted"                  # someone or something deleted the pod
    PREEMPTED = "Preempted"              # the scheduler made room for a higher-priority pod
    EVICTED = "Evicted"                  # node pressure or the eviction API
    OOM_KILLED = "OOMKilled"             # a container exceeded its memory limit
    IMAGE_PULL = "ImagePull"             # the image cannot be pulled: a replacement would fail the same way
    APPLICATION_ERROR = "ApplicationError"  # a container exited (a PySpark exception, a crashed JVM)
    CANNOT_RUN = "CannotRun"             # the worker stopped at start-up for a reason a replacement would share
    HEARTBEAT_EXPIRED = "HeartbeatExpired"  # the pod ran on but its worker went silent (hung, cut off)
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class Diagnosis:
    failure: Failure
    container: str = ""
    message: str = ""

    def __str__(self) -> str:
        where = f" in container {self.container}" if self.container else ""
        return f"{self.failure.value}{where}" + (f": {self.message}" if self.message else "")


_IMAGE_PULL = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
_DISRUPTION = {
    "PreemptionByScheduler": Failure.PREEMPTED,
    "PreemptionByKubeScheduler": Failure.PREEMPTED,
    "EvictionByEvictionAPI": Failure.EVICTED,
    "TerminationByKubelet": Failure.EVICTED,
    "DeletionByTaintManager": Failure.EVICTED,
}


def _statuses(pod: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    status = pod.get("status") or {}
    yield from status.get("initContainerStatuses") or []
    yield from status.get("containerStatuses") or []


def image_pull_error(pod: Mapping[str, Any]) -> Diagnosis | None:
    """A container waiting on an image it cannot pull (the pod itself is still there)."""
    for cs in _statuses(pod):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _IMAGE_PULL:
            return Diagnosis(Failure.IMAGE_PULL, cs.get("name", ""), waiting.get("message", waiting["reason"]))
    return None


def _disruption(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's DisruptionTarget condition when it is True (it is about to go: evicted, preempted, ...)."""
    return next((c for c in (pod.get("status") or {}).get("conditions") or []
                 if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None)


def failed(pod: Mapping[str, Any]) -> Diagnosis | None:
    """The worker in this pod is lost (or cannot start), and why; None while it is healthy or starting."""
    status = pod.get("status") or {}
    cond = _disruption(pod)
    if cond is not None:
        kind = _DISRUPTION.get(cond.get("reason", ""), Failure.EVICTED)
        return Diagnosis(kind, "", cond.get("message", cond.get("reason", "")))
    if status.get("reason") == "Evicted":
        return Diagnosis(Failure.EVICTED, "", status.get("message", ""))
    if status.get("reason") == "Preempting":
        return Diagnosis(Failure.PREEMPTED, "", status.get("message", ""))
    terminated = [(cs.get("name", ""), term) for cs in _statuses(pod)
                  for state in ((cs.get("state") or {}), (cs.get("lastState") or {}))
                  if (term := state.get("terminated")) is not None]
    for name, term in terminated:
        if term.get("reason") == "OOMKilled":
            return Diagnosis(Failure.OOM_KILLED, name, f"exit code {term.get('exitCode')}")
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return Diagnosis(Failure.DELETED)  # exits after this are the deletion's own doing
    for name, term in terminated:
        if term.get("exitCode") == exits.CANNOT_RUN:  # worker/exits.py: its reason is the termination message
            return Diagnosis(Failure.CANNOT_RUN, name, one_line(term.get("message") or "no reason written"))
    if terminated:
        name, term = terminated[0]
        detail = term.get("message") or term.get("reason") or ""
        return Diagnosis(Failure.APPLICATION_ERROR, name,
                         f"exit code {term.get('exitCode')}" + (f" ({detail})" if detail else ""))
    for cs in _statuses(pod):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") == "CrashLoopBackOff":
            return Diagnosis(Failure.APPLICATION_ERROR, cs.get("name", ""), waiting.get("message", "CrashLoopBackOff"))
    pulled = image_pull_error(pod)
    if pulled is not None:
        return pulled
    if status.get("phase") == "Failed":
        return Diagnosis(Failure.UNKNOWN, "", status.get("message", status.get("reason", "")))
    return None


def leaving(pod: Mapping[str, Any]) -> bool:
    """Evicted through the Eviction API (a drain) with its containers still running: the worker hands its
    channels over before it goes (``coordinator/evacuation.py``), so the pod is not lost yet. Its loss, if it
    dies first, comes with a container's exit or the pod's deletion."""
    cond = _disruption(pod)
    evicted = cond is not None and cond.get("reason") == "EvictionByEvictionAPI"
    return evicted and not any((cs.get("state") or {}).get("terminated") for cs in _statuses(pod))


def gone(pod: Mapping[str, Any]) -> Diagnosis:
    """The pod was deleted: the most specific reason it carried, else Deleted."""
    found = failed(pod)
    return found if found is not None else Diagnosis(Failure.DELETED)
