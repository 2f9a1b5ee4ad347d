"""A running pipeline's spec is changed: it is upgraded from a checkpoint, and a broken change rolls back.

One stateful pipeline (the clickstream's per-user running totals) runs on
the local cluster. While it runs, its aggregate's parallelism goes from 2
to 3 (with the sink it feeds and the workers) and its Spark container's
resources change: the operator takes a checkpoint, stops the run and
starts the new spec from it, the aggregate's state re-partitioned by key
(new pods, status Upgrading, then Running with the new spec as the stable
one, an Upgraded Event). Then its image is changed to one that does not
exist: the new pods never start, no step commits within
``spec.upgrade.healthDeadlineSeconds``, and the operator starts the last
stable spec again from the same checkpoint (lifecycle RolledBack, a
RolledBack Event) while the object keeps the spec as written. The pipeline
then finishes, and its output equals the oracle's with no duplicate: two
stops and restarts lost and repeated nothing.
"""

from __future__ import annotations

import json

from kubernetes import client

from ftpipeline_operator import render

from .test_operator import (GROUP, PLURAL, VERSION, compare, events, finished, operator,  # noqa: F401
                            oracle_spec, spark, start, status, wait_for)


def _runs(core: client.CoreV1Api, namespace: str, name: str) -> set[str]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"{render.PIPELINE_LABEL}={name}").items
    return {(p.metadata.labels or {}).get(render.RUN_LABEL, "") for p in pods}



def test_a_changed_spec_is_upgraded_from_a_checkpoint_and_a_broken_one_rolls_back(
        kube: client.ApiClient, namespace: str, operator: str, spark: object) -> None:
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    steps = 60
    name, doc, data = start(api, namespace, "upgrade", steps, until=4)
    wait_for("the first spec to be stable", lambda: status(api, namespace, name).get("lifecycleState") == "Running",
             60)
    first_run = _runs(core, namespace, name)

    # 1. parallelism 2 -> 3 and resources: a checkpoint, a stop, the new spec from it
    stages = [{**s, "parallelism": 3} if s["name"] in ("per-user", "output") else s for s in doc["spec"]["stages"]]
    api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": {
        "workers": 3, "stages": stages, "spark": {"resources": {"requests": {"cpu": "20m"}}}}})
    wait_for("the upgrade to run", lambda: events(core, namespace, name, "Upgraded"), 300)
    st = status(api, namespace, name)
    assert st["lifecycleState"] == "Running", st
    # the status names the stable spec (its generation, a digest); the spec itself is in a ConfigMap it owns
    assert "lastStableSpec" not in st and st["stableSpec"]["generation"] == 2, st
    held = core.read_namespaced_config_map(st["stableSpec"]["configMap"], namespace)
    stable = json.loads(held.data["spec.json"])
    assert held.metadata.owner_references[0].name == name
    assert stable["spark"]["resources"]["requests"]["cpu"] == "20m"
    assert _runs(core, namespace, name).isdisjoint(first_run), "the new spec runs on new pods"
    pods = core.list_namespaced_pod(namespace, label_selector=f"{render.PIPELINE_LABEL}={name}").items
    assert {c.resources.requests["cpu"] for p in pods for c in p.spec.containers if c.name == "spark"} == {"20m"}
    assert len(pods) == 3 and [s["parallelism"] for s in stable["stages"]] == [2, 2, 3, 3]
    at_upgrade = st.get("committedStep") or 0
    print(f"upgraded at step {at_upgrade}: {events(core, namespace, name, 'Upgraded')[-1]}")

    # 2. an image that does not exist: no step in time, the stable spec again
    api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": {
        "image": "ftpipeline:no-such-tag", "upgrade": {"healthDeadlineSeconds": 45}}})
    wait_for("the rollback", lambda: status(api, namespace, name).get("lifecycleState") == "RolledBack", 300)
    st = status(api, namespace, name)
    assert st["upgrade"]["result"] == "RolledBack", st
    [message, *_] = wait_for("the RolledBack Event", lambda: events(core, namespace, name, "RolledBack"), 60)
    print(f"rolled back: {message}")
    obj = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    assert obj["spec"]["image"] == "ftpipeline:no-such-tag"  # the object is left as written
    final = finished(api, namespace, name)
    assert final["phase"] == "Succeeded", final
    assert final["lifecycleState"] == "Succeeded" and final["committedStep"] == steps
    assert at_upgrade < steps, "the pipeline ended before the upgrade: nothing was tested"
    [result] = compare(spark, oracle_spec(doc, data), steps)
    assert result.duplicates == 0, result
    assert result.equal, result
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
