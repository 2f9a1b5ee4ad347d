"""A worker's Spark runs on the cores it is given (``spec/cores.py``)."""

from __future__ import annotations

import pytest

from ftpipeline.spec.cores import cores_of, cpu_quantity, master_for_pod, master_for_process


@pytest.mark.parametrize(("value", "cores"), [("2", 2.0), (2, 2.0), ("1.5", 1.5), ("500m", 0.5), ("2500m", 2.5)])
def test_cpu_quantities(value: object, cores: float) -> None:
    assert cpu_quantity(value) == cores


def test_a_pod_gets_its_limit_else_its_request_rounded_up_else_one() -> None:
    assert master_for_pod("", {"limits": {"cpu": "4"}, "requests": {"cpu": "1"}}) == "local[4]"
    assert master_for_pod("", {"requests": {"cpu": "1500m"}}) == "local[2]"
    assert master_for_pod("", {"limits": {"cpu": "250m"}}) == "local[1]"
    assert master_for_pod("", {"limits": {"memory": "2Gi"}}) == "local[1]"
    assert master_for_pod("", {}) == "local[1]"
    assert master_for_pod("", {"limits": {"cpu": "lots"}}) == "local[1]"


def test_local_workers_share_the_machine() -> None:
    assert master_for_process("", workers=1, cores=8) == "local[8]"
    assert master_for_process("", workers=3, cores=8) == "local[2]"
    assert master_for_process("", workers=3, cores=2) == "local[1]"


def test_the_pipelines_master_wins() -> None:
    assert master_for_process("local[3]", workers=1, cores=8) == "local[3]"
    assert master_for_pod("spark://spark-master:7077", {"limits": {"cpu": "4"}}) == "spark://spark-master:7077"


def test_shuffle_partitions_follow_the_task_threads() -> None:
    assert [cores_of(m) for m in ("local[4]", "local[1]", "local", "spark://x:7077")] == [4, 1, 1, 1]
