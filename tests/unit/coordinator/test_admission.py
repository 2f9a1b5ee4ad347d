"""admission.running_to_keep: a resumed run takes the running workers over whole, or kills them all.

The rule is pure once the workers' answers are in hand, so the workers here
are fakes answering ``state``; the take-over itself runs on real processes in
``tests/integration/coordinator/test_takeover.py``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from ftpipeline.coordinator.admission import running_to_keep, worker_config
from ftpipeline.coordinator.coordinator import Coordinator
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.worker.sidecar import config_digest
from ftpipeline.worker.transport import Unreachable

W0, W1 = WorkerId("w0"), WorkerId("w1")


class Worker:
    def __init__(self, answer: dict[str, Any] | Exception) -> None:
        self.answer = answer

    def call(self, action: str, body: Any = None, timeout_s: float | None = None) -> Any:
        assert action == "state"
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Fake:
    """The parts of a coordinator ``running_to_keep`` uses."""

    def __init__(self, running: list[WorkerId], resume: bool = True, workers: int = 2) -> None:
        self.resume = resume
        self.committed = 4
        self.spec = SimpleNamespace(workers=workers, source_text="spec: {}", base_dir=Path("/p"), store_key="k",
                                    metrics_label="p", chaining=True, reuse_plans=True, kafka_bootstrap="")
        self.killed: list[WorkerId] = []
        self.reserved: list[WorkerId] = []
        self.verdicts: list[str | None] = []
        self.cluster = SimpleNamespace(running=lambda: running, kill_worker=self.killed.append)
        self.members = SimpleNamespace(reserve=self.reserved.extend)
        self.addresses = {w: f"10.0.0.{i}:1" for i, w in enumerate(running)}
        self.store = SimpleNamespace(address=self.addresses.get)
        self.observer = SimpleNamespace(on_workers_kept=lambda workers, why: self.verdicts.append(why))
        self.ckpt = SimpleNamespace(allocated=3)
        self.answers: dict[WorkerId, dict[str, Any] | Exception] = {}

    def alike(self, epoch: int = 3, **changes: Any) -> dict[str, Any]:
        config = config_digest(worker_config(cast(Coordinator, self)))
        return {"state": "running", "step": 5, "epoch": epoch, "config": config, "fenced": None, **changes}

    def client(self, worker: WorkerId) -> Worker:
        return Worker(self.answers[worker])


def keep(fake: Fake) -> list[WorkerId]:
    return running_to_keep(cast(Coordinator, fake))


def test_workers_alike_are_kept_and_the_next_checkpoint_is_numbered_after_the_one_they_are_in() -> None:
    fake = Fake([W0, W1])
    fake.answers = {W0: fake.alike(epoch=4), W1: fake.alike(epoch=3)}
    assert keep(fake) == [W0, W1]
    assert fake.verdicts == [None] and not fake.killed
    assert fake.ckpt.allocated == 4  # epoch 4 was begun: a late snapshot report of it is not this run's
    assert fake.reserved == [W0, W1]


@pytest.mark.parametrize("case", ["count", "address", "unreachable", "fenced", "stopping", "other-spec", "never-created"])
def test_one_worker_that_cannot_be_kept_gets_them_all_killed(case: str) -> None:
    fake = Fake([W0, W1], workers=3 if case == "count" else 2)
    fake.answers = {W0: fake.alike(), W1: fake.alike()}
    if case == "address":
        del fake.addresses[W1]
    elif case == "unreachable":
        fake.answers[W1] = Unreachable("10.0.0.1:1", "state", ConnectionRefusedError("connection refused"))
    elif case in ("fenced", "stopping"):
        fake.answers[W1] = fake.alike(fenced=case)
    elif case == "other-spec":
        fake.answers[W1] = fake.alike(config="0123456789abcdef")
    elif case == "never-created":
        fake.answers[W1] = fake.alike(config=None)
    assert keep(fake) == []
    assert fake.killed == [W0, W1] and fake.reserved == [W0, W1]  # the new set is numbered after them
    [why] = fake.verdicts
    assert why is not None and (case == "count" or "w1" in why), why
    assert fake.ckpt.allocated == 3


def test_a_fresh_run_keeps_nothing_and_asks_nothing() -> None:
    fake = Fake([W0, W1], resume=False)
    assert keep(fake) == [] and not fake.killed and not fake.verdicts
    assert keep(Fake([])) == []
