"""Event time going wrong, on Kubernetes: records a window drops as late (it has no ``lateData``), more than 1% of
what it took, are each told as a Warning Event on the FTPipeline and set its EventTimeDegraded condition, where
``ftpipeline run`` says them in a line (``eventtime/watch.py``); the run itself goes on and succeeds."""

from __future__ import annotations

import json
import os
import random
import uuid
from typing import Any

from kubernetes import client

from .test_operator import (GROUP, HOST_ROOT, PLURAL, RUNTIME_UID, VERSION, _writable_dir, create_pipeline,  # noqa: F401
                            finished, operator, pipeline, pytestmark)  # (fixture: the operator; no helm, no test)

ROWS, PER_STEP, LATE = 2_000, 200, 0.05


def views(seed: int = 13) -> list[dict[str, Any]]:
    """Views over about 30 minutes, in order but for 5% of them, 10 minutes behind the newest (late for a
    1-minute window whose watermark is 10 s behind)."""
    rng = random.Random(seed)
    start = 1_767_225_600_000
    rows = []
    for i in range(ROWS):
        ts = start + i * 900
        if i > PER_STEP and rng.random() < LATE:
            ts -= 10 * 60_000
        rows.append({"page": f"/p{rng.randrange(20)}", "ts": ts})
    return rows


def test_late_records_dropped_are_warning_events_and_a_condition_and_the_run_succeeds(
        kube: client.ApiClient, namespace: str, operator: str) -> None:
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    name = f"late-{uuid.uuid4().hex[:6]}"
    data = _writable_dir(HOST_ROOT / name)
    inputs = _writable_dir(data / "in")
    (inputs / "views.jsonl").write_text("".join(json.dumps(r) + "\n" for r in views()))
    os.chown(inputs / "views.jsonl", RUNTIME_UID, RUNTIME_UID)
    doc = pipeline(namespace, name, 100, data)  # the image, volumes and resources of the other tests
    doc["spec"]["stages"] = [
        {"name": "views", "source": {
            "file": {"path": f"/data/{name}/in", "format": "jsonl", "rowsPerStep": PER_STEP,
                     "schema": {"page": "string", "ts": "long"}},
            "eventTime": {"column": "ts", "watermark": {"maxOutOfOrderness": "10s"}}}},
        {"name": "per-minute", "parallelism": 2, "inputs": [{"stage": "views"}],
         "aggregate": {"keyBy": ["page"], "window": {"tumbling": {"size": "1m"}, "emit": "append"},
                       "aggregations": [{"name": "views", "op": "count"}]}},
        {"name": "minutes", "parallelism": 2, "inputs": [{"stage": "per-minute"}],
         "sink": {"parquet": {"path": f"/data/{name}/out"}}}]
    create_pipeline(api, doc, data)
    final = finished(api, namespace, name)
    assert final["phase"] == "Succeeded" and final["committedStep"] == ROWS // PER_STEP + 1, final
    conditions = {c["type"]: c for c in final["conditions"]}
    assert conditions["EventTimeDegraded"]["status"] == "True", conditions
    events = [e for e in core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
              if e.type == "Warning"]
    told = {e.reason: e.message for e in events}
    assert "LateRecordsDropped" in told and "LateRecords" in told, told
    assert "per-minute" in told["LateRecordsDropped"] and "per-minute" in told["LateRecords"], told
    assert "lateData" in told["LateRecordsDropped"], told  # what would keep them
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
