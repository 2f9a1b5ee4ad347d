"""How a run ends other than by finishing: the exceptions the CLI and the operator tell apart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ftpipeline.barrier.existing import ExistingOutput


class PipelineFailed(RuntimeError):
    """The run cannot continue; the message says why, naming the task or worker."""


class NoMemberAnswers(PipelineFailed):
    """A call any member could answer reached none: every one died a moment ago (their losses arrive next),
    or the coordinator was cut off from all of them."""


class ExistingOutputFound(PipelineFailed):
    """A fresh run over sinks that hold output and say ``existingOutput: fail``: trying again cannot help
    until the spec (or the storage) changes."""

    def __init__(self, problems: Sequence[ExistingOutput]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(map(str, self.problems)))


class TaskFailed(PipelineFailed):
    """A task raised: ``user`` says which stage, function, exception and line when it was the pipeline's
    own code (``worker/user_errors.py``)."""

    def __init__(self, task: str, worker: str, error: str, user: dict[str, Any] | None = None) -> None:
        self.task, self.worker, self.error, self.user = task, worker, error, user
        where = f"task {task} on worker {worker}"
        super().__init__(f"{error} ({where})" if user else f"{where} failed: {error}")

    def details(self) -> dict[str, Any]:
        """What ``--summary-json`` and the operator's status keep of it."""
        return {"task": self.task, "worker": self.worker, "error": self.error, **({"user": self.user} if self.user else {})}


class CannotRun(PipelineFailed):
    """A worker stopped at start-up for a reason every replacement would meet too (``worker/exits.py``): the
    entry point does not import, a stage names a missing function, an input is not there. Trying again cannot
    help until the spec (its image, or a restartNonce once the volume is fixed) changes, so the run fails
    instead of replacing it."""

    def __init__(self, worker: str, reason: str) -> None:
        self.worker, self.reason = worker, reason
        super().__init__(f"worker {worker} cannot run: {reason}")


class RestoreRefused(PipelineFailed):
    """A named checkpoint that cannot be restored exactly; raised before anything is touched, so the
    pipeline can go on from its newest checkpoint instead."""


class Interrupted(RuntimeError):
    """The run was asked to stop (operator: suspend, restart, deletion); its state stays resumable."""


class Superseded(Interrupted):
    """Another coordinator claimed the pipeline's command log (``commandlog/zklog.py``): this one stops and
    touches nothing more; its workers are the new one's to replace."""
