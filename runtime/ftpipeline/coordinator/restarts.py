"""Restart budget and backoff for replacement workers.

Recovery itself never waits: the survivors take the lost work at once. What
is rationed is the *replacement*. A worker that keeps dying — out of memory,
an image that cannot be pulled, user code that crashes the JVM — must not be
replaced in a hot loop, and must not be replaced forever: after
``maxRestarts`` losses within ``windowSeconds`` the run fails, naming the
budget, as a Kubernetes Job fails at its ``backoffLimit``.

    (loss) --budget left--> replacement due after a backoff delay
    (loss) --budget spent--> EXHAUSTED: the run fails

The delay doubles with every loss still inside the window, from
``initialMs`` up to ``maxMs``, and is spread by ±``jitterPercent`` so that
pipelines hit by the same node failure do not restart in step. The same
policy serves local processes and pods.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 5
    window_s: float = 600.0
    initial_ms: int = 1000
    max_ms: int = 60_000
    jitter_percent: int = 20


class BudgetExhausted(RuntimeError):
    """More losses within the window than the budget allows."""


class RestartBudget:
    def __init__(self, policy: RestartPolicy, seed: int = 0) -> None:
        self.policy = policy
        self._rng = random.Random(seed)
        self._losses: deque[float] = deque()

    def in_window(self, now: float) -> int:
        while self._losses and now - self._losses[0] > self.policy.window_s:
            self._losses.popleft()
        return len(self._losses)

    def on_loss(self, now: float) -> float:
        """Record a lost worker; return how many seconds to wait before replacing it."""
        n = self.in_window(now) + 1
        if n > self.policy.max_restarts:
            raise BudgetExhausted(
                f"{n} worker losses within {self.policy.window_s:.0f} s exceed the restart budget of "
                f"{self.policy.max_restarts} (spec.recovery.restartBudget)")
        self._losses.append(now)
        return self.delay(n)

    def delay(self, n: int) -> float:
        """Backoff before the ``n``-th replacement in the window (n >= 1), with jitter."""
        p = self.policy
        base = float(min(p.max_ms, p.initial_ms << min(n - 1, 30)))
        spread = base * p.jitter_percent / 100
        return max(0.0, base + self._rng.uniform(-spread, spread)) / 1000
