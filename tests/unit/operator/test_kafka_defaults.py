"""Which Kafka cluster a pipeline on Kubernetes uses: its own, or the chart's broker, or it cannot run."""

from __future__ import annotations

from typing import Any

import pytest

from ftpipeline_operator.resolve import Defaults, Unrunnable, resolve_spec


def body(**kafka: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline",
        "metadata": {"name": "clicks", "namespace": "data", "uid": "1234", "generation": 1},
        "spec": {"entryPoint": "/opt/app/clicks.py", "workers": 2, **({"kafka": kafka} if kafka else {}),
                 "stages": [{"name": "s", "source": {"kafka": {"topic": "in", "format": "raw"}}},
                            {"name": "out", "inputs": [{"stage": "s"}], "sink": {"kafka": {"topic": "out"}}}]},
    }


def test_a_pipeline_that_names_no_cluster_gets_the_charts_broker() -> None:
    spec = resolve_spec(body(), None, Defaults(kafka="ftp-kafka.ops.svc:9092"))  # type: ignore[arg-type]
    assert spec.kafka_bootstrap == "ftp-kafka.ops.svc:9092"


def test_its_own_cluster_wins_and_a_secret_is_left_to_the_workers() -> None:
    own = resolve_spec(body(bootstrapServers="k:9092"), None, Defaults(kafka="chart:9092"))  # type: ignore[arg-type]
    assert own.kafka_bootstrap == "k:9092"
    secret = resolve_spec(body(secretRef={"name": "k", "key": "endpoint"}), None,  # type: ignore[arg-type]
                          Defaults(kafka="chart:9092"))
    assert secret.kafka_bootstrap == ""  # the workers read it from their env (render.kafka_env)


def test_without_any_cluster_the_pipeline_cannot_run_and_says_which_fields() -> None:
    with pytest.raises(Unrunnable, match=r"spec.kafka names no cluster .* kafka.enabled"):
        resolve_spec(body(), None, Defaults())  # type: ignore[arg-type]
