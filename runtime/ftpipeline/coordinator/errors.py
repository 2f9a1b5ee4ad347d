"""How a run ends other than by finishing: the two exceptions the CLI and the operator tell apart."""

from __future__ import annotations


class PipelineFailed(RuntimeError):
    """The run cannot continue; the message says why, naming the task or worker."""


class Interrupted(RuntimeError):
    """The run was asked to stop (operator: suspend, restart, deletion); its state stays resumable."""
