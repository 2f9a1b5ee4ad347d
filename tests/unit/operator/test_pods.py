"""Which pods of an earlier run a resumed run may take over (``pods.keepable_run``): all alike, or none."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ftpipeline_operator import render
from ftpipeline_operator.pods import keepable_run

from .test_render import body

DEFAULTS = {"redis": "redis://r:6379/0", "image": "registry/ftpipeline:1"}


def running(b: dict[str, Any], run: str = "r1", workers: int = 2) -> list[dict[str, Any]]:
    """The pods as the API server lists them (the client's snake_case), Running and ready."""
    pods = []
    for i in range(workers):
        pod = render.worker_pod(b, f"w{i}", run, DEFAULTS)
        pod["status"] = {"phase": "Running", "container_statuses": [{"name": "spark", "ready": True},
                                                                    {"name": "sidecar", "ready": True}]}
        pods.append(pod)
    return pods


def test_the_pods_of_one_run_rendered_alike_and_all_ready_are_kept_with_their_run_label() -> None:
    assert keepable_run(running(body()), body(), DEFAULTS, 2) == "r1"


def test_pods_of_another_spec_or_another_default_are_not_kept() -> None:
    pods = running(body())
    assert keepable_run(pods, body(workers=2, sidecar={"resources": {"limits": {"cpu": "1"}}}), DEFAULTS, 2) is None
    assert keepable_run(pods, body(), {**DEFAULTS, "redis": "redis://other:6379/0"}, 2) is None
    own = {k: v for k, v in body().items()}
    own["spec"] = {k: v for k, v in own["spec"].items() if k != "image"}  # the operator's image
    assert keepable_run(running(own), own, DEFAULTS, 2) == "r1"
    assert keepable_run(running(own), own, {**DEFAULTS, "image": "registry/ftpipeline:2"}, 2) is None  # upgraded


def _set(path: str, value: Any, key: str = "") -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        *parents, last = [*path.split("."), *([key] if key else [])]
        at = pod
        for parent in parents:
            at = at[parent]
        at[last] = value
    return change


def test_a_missing_failing_deleting_unready_or_foreign_pod_keeps_none() -> None:
    b = body()
    assert keepable_run(running(b)[:1], b, DEFAULTS, 2) is None  # one is gone
    assert keepable_run([], b, DEFAULTS, 2) is None
    for change in (_set("status.phase", "Failed"), _set("status.phase", "Pending"),
                   _set("status.container_statuses", [{"name": "spark", "ready": True}, {"name": "sidecar", "ready": False}]),
                   _set("status.container_statuses", []),  # no container reported yet
                   _set("metadata.deletion_timestamp", "2026-11-27T00:00:00Z"),
                   _set("metadata.labels", "r0", render.RUN_LABEL),       # a pod of another run
                   _set("metadata.annotations", {})):                      # rendered before digests existed
        pods = running(b)
        change(pods[1])
        assert keepable_run(pods, b, DEFAULTS, 2) is None
