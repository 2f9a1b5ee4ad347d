"""Every action of the sidecar is callable on exactly one listener: the coordinator's or the Spark process's."""

from __future__ import annotations

from ftpipeline.worker.checkpoint_files import CheckpointFiles
from ftpipeline.worker.outputs import Outputs
from ftpipeline.worker.server import COORDINATOR_ACTIONS, SPARK_ACTIONS
from ftpipeline.worker.sidecar import Sidecar


def _actions(cls: type) -> set[str]:
    return {name.removeprefix("_do_") for name in dir(cls) if name.startswith("_do_")}


def test_the_two_lists_cover_every_action_once() -> None:
    defined = _actions(Sidecar) | _actions(CheckpointFiles) | _actions(Outputs)
    assert not COORDINATOR_ACTIONS & SPARK_ACTIONS
    assert COORDINATOR_ACTIONS | SPARK_ACTIONS == defined, "list a new action on the listener of its caller"


def test_the_spark_process_can_not_steer_the_run() -> None:
    assert {"shutdown", "create", "open", "release", "step", "checkpoint", "reset_checkpoints"} <= COORDINATOR_ACTIONS
    assert {"task_done", "next_task", "hello"} <= SPARK_ACTIONS
