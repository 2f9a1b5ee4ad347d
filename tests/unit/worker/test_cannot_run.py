"""A worker that cannot run its pipeline exits with CANNOT_RUN naming the field, in the termination message the
kubelet keeps and in its directory, where the local backend reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftpipeline.worker import exits


def test_the_reason_goes_to_the_termination_log_and_the_worker_dir_and_the_exit_code_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "termination-log"
    monkeypatch.setattr(exits, "TERMINATION_LOG", log)
    why = "invalid pipeline: spec.stages[1].transform.function: 'x.py' has no function 'nosuch'"
    with pytest.raises(SystemExit) as exited:
        exits.cannot_run(why, tmp_path)
    assert exited.value.code == exits.CANNOT_RUN == 78
    assert log.read_text() == why
    assert exits.reason(tmp_path) == why


def test_outside_a_container_it_still_exits_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exits, "TERMINATION_LOG", Path("/nonexistent/dir/termination-log"))
    with pytest.raises(SystemExit):
        exits.cannot_run("why", tmp_path)
    assert exits.reason(tmp_path) == "why"
    assert exits.reason(tmp_path / "elsewhere") == "no reason written"
