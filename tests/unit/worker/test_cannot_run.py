"""A worker that cannot run its pipeline exits naming the field, in the termination message the kubelet keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftpipeline.worker import executor


def test_the_reason_goes_to_the_termination_log_and_the_process_exits_1(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "termination-log"
    monkeypatch.setattr(executor, "TERMINATION_LOG", log)
    with pytest.raises(SystemExit) as exited:
        executor._cannot_run("invalid pipeline: spec.stages[1].transform.function: 'x.py' has no function 'nosuch'")
    assert exited.value.code == 1
    assert log.read_text().endswith("has no function 'nosuch'")


def test_outside_a_container_it_still_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "TERMINATION_LOG", Path("/nonexistent/dir/termination-log"))
    with pytest.raises(SystemExit):
        executor._cannot_run("why")
