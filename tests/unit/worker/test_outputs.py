"""A worker's requests to its Spark process (a Delta step's write): handed out before any task, answered,
abandoned after the timeout; and which answers end a release how."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ftpipeline.barrier.delta import DeltaReleaseError, StepWrite
from ftpipeline.worker import outputs
from ftpipeline.worker.outputs import Outputs

WRITE = StepWrite("table", "/t", "app-table", 3, ("/t/_ftpipeline_staging/step=3/part-00000.parquet",), (), False)


def _outputs() -> tuple[Outputs, list[int]]:
    woken: list[int] = []
    return Outputs("w0", None, lambda: True, lambda: woken.append(1)), woken  # type: ignore[arg-type]


def _answering(out: Outputs, answer: dict[str, Any]) -> threading.Thread:
    def spark_process() -> None:
        while (request := out.take()) is None:
            pass
        assert request["write_step"]["body"] == WRITE.to_json()
        out._do_answer({"id": request["write_step"]["id"], **answer})

    thread = threading.Thread(target=spark_process)
    thread.start()
    return thread


def test_a_write_is_handed_to_the_spark_process_and_waits_for_its_answer() -> None:
    out, woken = _outputs()
    thread = _answering(out, {"ok": True})
    out._write(WRITE)
    thread.join()
    assert woken, "a waiting next_task looks again at once"
    assert out.take() is None and not out._pending


def test_a_refused_write_is_a_user_error_and_a_failed_one_may_be_tried_again() -> None:
    out, _ = _outputs()
    thread = _answering(out, {"error": "table refuses step 3", "user": True})
    with pytest.raises(DeltaReleaseError, match="refuses step 3") as refused:
        out._write(WRITE)
    thread.join()
    assert refused.value.user
    thread = _answering(out, {"error": "disk full", "user": False})
    with pytest.raises(DeltaReleaseError) as failed:
        out._write(WRITE)
    thread.join()
    assert not failed.value.user


def test_a_write_nobody_answers_is_abandoned_and_a_late_answer_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outputs, "WRITE_TIMEOUT_S", 0.05)
    out, _ = _outputs()
    with pytest.raises(DeltaReleaseError, match="did not write step 3 within"):
        out._write(WRITE)
    assert out.take() is None, "an abandoned request is not handed out later"
    assert out._do_answer({"id": 1, "ok": True}) == {"ok": True}
