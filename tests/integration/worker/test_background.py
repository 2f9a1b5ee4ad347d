"""A sidecar's wake-ups: a completion announced by one worker wakes another's task hand-out (real Redis)."""

from __future__ import annotations

import threading
from pathlib import Path

from ftpipeline.control.redisclient import connect
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.worker.background import Background
from ftpipeline.worker.sidecar import Sidecar


def test_an_announced_completion_wakes_the_other_workers_hand_out(tmp_path: Path, redis_url: str) -> None:
    sidecar = Sidecar(WorkerId("w1"), "wake-test", redis_url, tmp_path / "w1")
    listener = threading.Thread(target=Background(sidecar).listen, daemon=True)
    listener.start()
    other = LineageTables(connect(redis_url), "wake-test")
    other_pipeline = LineageTables(connect(redis_url), "another-pipeline")
    try:
        woken = False
        for _ in range(50):  # the subscription may not be in place yet: announce until it is
            other_pipeline.announce(WorkerId("w9"))
            assert not sidecar._ready.wait(0.02), "another pipeline's announcement woke this one"
            other.announce(WorkerId("w0"))
            if sidecar._ready.wait(0.1):
                woken = True
                break
        assert woken, "no wake-up from an announcement"
    finally:
        sidecar.stopping.set()
        listener.join(5)
    assert not listener.is_alive()
