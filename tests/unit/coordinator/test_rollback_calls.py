"""rollback's calls to the survivors: one that does not answer is the next loss, not this recovery's failure."""

from __future__ import annotations

from typing import Any, cast

from ftpipeline.control.store import RunStore
from ftpipeline.coordinator.recovery import rollback
from ftpipeline.lineage.naming import Channel, WorkerId
from ftpipeline.lineage.planner import TablesView
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.worker.transport import SidecarClient, Unreachable
from tests.unit.lineage.history import W0, W1, graph


class Survivor:
    """A worker as rollback calls it: open, then state until it is no longer opening, then wake."""

    def __init__(self, name: str, gone: bool = False) -> None:
        self.name, self.gone = name, gone
        self.calls: list[str] = []

    def call(self, action: str, body: dict[str, Any] | None = None, timeout_s: float | None = None) -> Any:
        if self.gone:
            raise Unreachable(f"127.0.0.1:1/{self.name}", action, ConnectionRefusedError("Connection refused"))
        self.calls.append(action)
        return {"state": "running"} if action == "state" else {}


class Tables:
    """What rollback writes to the lineage tables (recorded, not interpreted)."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def set_placement(self, moves: object) -> None:
        self.writes.append("placement")

    def reset_for_restore(self, survivors: object, inflight: object, epoch: int) -> None:
        self.writes.append("reset")

    def assign(self, tasks: object) -> None:
        self.writes.append("assign")


class NoSteps:
    def step(self, step: int) -> None:
        return None


def test_a_survivor_that_stops_answering_during_a_rollback_does_not_fail_it() -> None:
    g = graph()
    placement = {ch: (W0 if ch.index == 0 else W1) for ch in g.channels()}
    view = TablesView({}, {}, {}, {}, {}, {}, placement, {})
    alive, gone = Survivor("w0"), Survivor("w1", gone=True)
    clients = cast(dict[WorkerId, SidecarClient], {W0: alive, W1: gone})
    record = rollback(g, cast(LineageTables, Tables()), cast(RunStore, NoSteps()), view, None, placement, {},
                      [W0, W1], 2, None, 0, clients, 0.0, lambda: 0.0)
    assert record.strategy == "checkpoint" and record.boundary == 0
    assert alive.calls == ["open", "state", "wake"], "the one that answers reopens and is woken"
    assert all(isinstance(ch, Channel) for ch in record.placement), "the placement is kept for the next loss"
