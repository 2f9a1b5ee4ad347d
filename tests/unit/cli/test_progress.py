"""What ``ftpipeline run`` shows: a step count with a total only when one is known, a line per fault, and a
fault ledger that a resumed run's summary counts."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from ftpipeline.coordinator.trigger import Reason
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.progress import FaultLedger, LocalObserver, ProgressObserver


def _shown(observer: ProgressObserver) -> str:
    out = Console(file=io.StringIO(), width=200, force_terminal=False)
    out.print(observer.progress.make_tasks_table(observer.progress.tasks))
    text = out.file.getvalue()  # type: ignore[attr-defined]
    return " ".join(text.split())


def _run_steps(observer: ProgressObserver, steps: int) -> None:
    workers = [WorkerId("w0"), WorkerId("w1")]
    observer.on_workers_starting(workers)
    for i, w in enumerate(workers, 1):
        observer.on_worker_joined(w, i, 2)
    for step in range(1, steps + 1):
        observer.on_step_started(step, Reason.RECORDS, 10)
        observer.on_step_committed(step, 10, 0.1)


def test_without_a_known_total_the_counter_is_a_count_with_a_rate_not_steps_over_workers() -> None:
    observer = ProgressObserver(Console(file=io.StringIO()), None, None)
    _run_steps(observer, 14)
    shown = _shown(observer)
    assert "14/2" not in shown and "/2" not in shown, shown
    assert "14 steps (" in shown and "/s)" in shown, shown


def test_with_max_steps_the_counter_shows_the_total() -> None:
    observer = ProgressObserver(Console(file=io.StringIO()), 24, None)
    _run_steps(observer, 6)
    assert "6/24 steps" in _shown(observer)


def test_without_a_progress_bar_each_fault_still_gets_a_line(tmp_path: Path) -> None:
    out = io.StringIO()
    observer = LocalObserver(Console(file=out, width=1000), FaultLedger(tmp_path / "faults.jsonl", fresh=True))
    observer.on_worker_lost(WorkerId("w1"), "heartbeat expiry after 2000 ms")
    observer.on_control_plane("redis", False, "redis unreachable, the run is paused until it answers: gone")
    observer.on_control_plane("redis", True, "redis answers again after 3.0 s; the run continues")
    observer.on_fenced(WorkerId("w1"), "its late commit of task t was refused")
    lines = out.getvalue().splitlines()
    assert len(lines) == 4, lines
    assert "worker w1 lost, found by heartbeat expiry after 2000 ms" in lines[0]
    assert "fenced off: its late commit" in lines[3]
    resumed = FaultLedger(tmp_path / "faults.jsonl", fresh=False)
    assert resumed.earlier == {"pause": 1}
    assert FaultLedger(tmp_path / "faults.jsonl", fresh=True).earlier == {}


def test_bounded_sources_give_the_counter_its_total() -> None:
    observer = ProgressObserver(Console(file=io.StringIO()), None, None)
    observer.on_steps_expected(9)  # a directory read to its end: the coordinator knows its steps
    _run_steps(observer, 6)
    assert "6/9 steps" in _shown(observer)
