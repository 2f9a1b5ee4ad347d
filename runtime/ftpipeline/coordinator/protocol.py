"""Coordinator start-up (Feldera): decide between resuming and creating.

On start the coordinator calls ``state()`` on every worker:

- every worker ``open``/``running`` at the same step: the coordinator
  restarted while the workers stayed up -> ``Resume(step)``;
- otherwise (a fresh start, or workers at different steps) -> ``Create``:
  workers that are not closed are shut down first, then all are created.
  (Opening the newest common checkpoint instead of creating arrives with
  checkpoints.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Resume:
    step: int


@dataclass(frozen=True)
class Create:
    shutdown_first: tuple[str, ...] = ()


def startup_decision(states: Mapping[str, Mapping[str, Any]]) -> Resume | Create:
    kinds = {s["state"] for s in states.values()}
    steps = {s["step"] for s in states.values()}
    if states and kinds <= {"open", "running"} and len(steps) == 1:
        return Resume(int(next(iter(steps))))
    return Create(tuple(sorted(w for w, s in states.items() if s["state"] != "closed")))
