"""Which pipelines use the operator's object store, and one that needs a store and has none is refused by field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client

from ftpipeline.spec.load import SpecError, parse_pipeline
from ftpipeline.spec.model import PipelineSpec
from ftpipeline_operator.objectstores import issue, user_of, uses_operator_store


def doc(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline",
            "metadata": {"name": "clicks", "namespace": "data", "uid": "1234"},
            "spec": {"entryPoint": "/opt/app/clicks.py", "workers": 1, "stages": [
                {"name": "s", "source": {"generator": {"function": "g", "rowsPerStep": 10}}},
                {"name": "out", "inputs": [{"stage": "s"}], "sink": {"parquet": {"path": "s3://clicks/out"}}}],
                **spec}}


def parse(body: dict[str, Any]) -> PipelineSpec:
    return parse_pipeline(yaml.safe_dump(body), Path("/p"), check_entry_point=False)


def test_only_s3_locations_without_a_store_of_their_own_use_the_operators() -> None:
    body = doc()
    spec = parse(body)
    assert uses_operator_store(body, spec)
    own = doc(objectStore={"secretRef": {"name": "mine"}})
    assert not uses_operator_store(own, parse(own))
    local = doc()
    local["spec"]["stages"][1]["sink"]["parquet"]["path"] = "/data/out"
    assert not uses_operator_store(local, parse(local))


def test_an_s3_location_with_no_store_anywhere_is_refused_naming_the_field() -> None:
    body = doc()
    spec = parse(body)
    with pytest.raises(SpecError) as refused:
        issue(cast(client.CoreV1Api, None), body, spec, None)
    [problem] = refused.value.problems
    assert problem.path == "spec.stages[1].sink.parquet.path" and "spec.objectStore names none" in problem.message


def test_a_pipelines_user_is_its_namespace_and_name() -> None:
    assert user_of("data", "clicks") == user_of("data", "clicks") and len(user_of("data", "clicks")) <= 32
    assert len({user_of("data", "clicks"), user_of("other", "clicks"), user_of("data", "clicks2")}) == 3
