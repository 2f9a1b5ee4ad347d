"""Rendering a pipeline's pods, Service and ConfigMap from its FTPipeline (no API server needed)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from ftpipeline_operator import render


def body(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline",
        "metadata": {"name": "clicks", "namespace": "data", "uid": "1234", "generation": 3},
        "spec": {"image": "registry/ftpipeline:1", "entryPoint": "/opt/app/clicks.py", "workers": 2,
                 "stages": [{"name": "s", "source": {"generator": {"function": "g", "rowsPerStep": 10}}}], **spec},
    }


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    [c] = [c for c in pod["spec"]["containers"] if c["name"] == name]
    return c


def test_worker_pod_runs_the_same_two_processes_as_ftpipeline_run() -> None:
    pod = render.worker_pod(body(), "w1", "run-a", {"redis": "redis://r:6379/0"})
    assert pod["metadata"]["name"] == "clicks-w1"
    assert pod["metadata"]["namespace"] == "data"
    assert pod["metadata"]["labels"][render.WORKER_LABEL] == "w1"
    assert pod["metadata"]["labels"][render.RUN_LABEL] == "run-a"
    [owner] = pod["metadata"]["ownerReferences"]
    assert owner == {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "name": "clicks", "uid": "1234",
                     "controller": True, "blockOwnerDeletion": True}
    spark, sidecar = container(pod, "spark"), container(pod, "sidecar")
    assert spark["command"][-1] == "ftpipeline.worker.executor"
    assert sidecar["command"][-1] == "ftpipeline.worker.server"
    assert "--advertise" in sidecar["args"] and "$(POD_IP)" in sidecar["args"]
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["FTPIPELINE_REDIS_URL"]["value"] == "redis://r:6379/0"
    assert pod["spec"]["restartPolicy"] == "Never"


def test_the_spark_container_which_runs_user_code_is_not_told_the_control_planes_endpoints() -> None:
    secret = {"secretRef": {"name": "redis-auth", "key": "url"}}
    pod = render.worker_pod(body(redis=secret, zookeeper={"connect": "zk:2181"}), "w0", "r",
                            {"redis": "redis://:pw@r:6379/0", "zookeeper": "zk:2181"})
    spark, sidecar = container(pod, "spark"), container(pod, "sidecar")
    assert {"FTPIPELINE_REDIS_URL", "FTPIPELINE_ZOOKEEPER"} <= {e["name"] for e in sidecar["env"]}
    assert not {e["name"] for e in spark["env"]} & {"FTPIPELINE_REDIS_URL", "FTPIPELINE_ZOOKEEPER"}
    assert "redis-auth" not in json.dumps(spark) and "zk:2181" not in json.dumps(spark)
    assert not [m for m in spark["volumeMounts"] if m["name"] == "pipeline"], "the document (spec.redis) is the sidecar's"


def test_pods_are_non_root_with_a_read_only_root_filesystem() -> None:
    pod = render.worker_pod(body(), "w0", "r", {})
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    for c in pod["spec"]["containers"]:
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]


def test_spark_conf_resources_and_user_volumes_reach_the_pod() -> None:
    pod = render.worker_pod(body(
        spark={"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"},
               "resources": {"limits": {"memory": "2Gi"}}},
        volumes=[{"name": "out", "hostPath": {"path": "/data/out"}}],
        volumeMounts=[{"name": "out", "mountPath": "/out"}],
    ), "w0", "r", {})
    spark = container(pod, "spark")
    args = spark["args"]
    assert args[args.index("--spark-master") + 1] == "local[2]"
    assert json.loads(args[args.index("--spark-conf") + 1]) == {"spark.sql.shuffle.partitions": "4"}
    assert spark["resources"] == {"limits": {"memory": "2Gi"}}
    assert {"name": "out", "hostPath": {"path": "/data/out"}} in pod["spec"]["volumes"]
    for c in pod["spec"]["containers"]:
        assert {"name": "out", "mountPath": "/out"} in c["volumeMounts"]


def test_without_a_master_spark_runs_on_the_containers_cpu_limit() -> None:
    def master(**spark: object) -> str:
        args = container(render.worker_pod(body(spark=spark), "w0", "r", {}), "spark")["args"]
        return str(args[args.index("--spark-master") + 1])

    assert master(resources={"limits": {"cpu": "3"}}) == "local[3]"
    assert master(resources={"requests": {"cpu": "1500m"}}) == "local[2]"
    assert master() == "local[1]"


def test_redis_from_a_secret() -> None:
    pod = render.worker_pod(body(redis={"secretRef": {"name": "redis", "key": "url"}}), "w0", "r",
                            {"redis": "redis://default"})
    env = {e["name"]: e for e in container(pod, "sidecar")["env"]}
    assert env["FTPIPELINE_REDIS_URL"] == {"name": "FTPIPELINE_REDIS_URL",
                                           "valueFrom": {"secretKeyRef": {"name": "redis", "key": "url"}}}


def test_service_selects_exactly_the_worker_pods() -> None:
    svc = render.service(body())
    pod = render.worker_pod(body(), "w0", "r", {})
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"] for p in svc["spec"]["ports"]}
    assert ports == {p["name"] for p in container(pod, "sidecar")["ports"]}


def test_config_map_holds_the_document_ftpipeline_run_would_take() -> None:
    cm = render.config_map(body())
    doc = yaml.safe_load(cm["data"][render.PIPELINE_FILE])
    assert doc["metadata"] == {"name": "clicks"}
    assert doc["spec"]["image"] == "registry/ftpipeline:1"
    pod = render.worker_pod(body(), "w0", "r", {})
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "pipeline"]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]


def test_the_worker_credentials_are_a_secret_of_the_pipeline_mounted_in_the_sidecar_alone() -> None:
    from ftpipeline.worker.tls import generate

    credentials = generate("data.clicks.1234")
    secret = render.tls_secret(body(), credentials)
    assert secret["type"] == "kubernetes.io/tls" and secret["metadata"]["name"] == "clicks-worker-tls"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "1234", "deleted with its pipeline"
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    pod = render.worker_pod(body(), "w0", "r", {})
    [volume] = [v for v in pod["spec"]["volumes"] if v.get("secret", {}).get("secretName") == "clicks-worker-tls"]
    spark, sidecar = container(pod, "spark"), container(pod, "sidecar")
    assert any(m["name"] == volume["name"] for m in sidecar["volumeMounts"])
    assert sidecar["args"][sidecar["args"].index("--tls-dir") + 1] == render.TLS_DIR
    assert not any(m["name"] == volume["name"] for m in spark["volumeMounts"]), "user code gets no certificate"


def test_a_pipeline_that_brings_its_certificate_mounts_that_secret() -> None:
    pod = render.worker_pod(body(tls={"secretName": "clicks-cert"}), "w0", "r", {})
    secrets = [v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v]
    assert secrets == ["clicks-cert"]


def test_a_pipeline_user_of_the_shared_redis_reaches_the_sidecar_from_a_secret_never_as_a_literal() -> None:
    pod = render.worker_pod(body(), "w0", "r", {"redis": "redis://:admin@r:6379/0", "redisSecret": "clicks-store"})
    env = {e["name"]: e for e in container(pod, "sidecar")["env"]}
    assert env["FTPIPELINE_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "clicks-store",
                                                                       "key": render.STORE_REDIS_KEY}
    assert "admin" not in str(pod), "the admin's URL is in no pod"
    own = render.worker_pod(body(redis={"url": "redis://theirs:6379/0"}), "w0", "r", {"redisSecret": "clicks-store"})
    assert {e["name"]: e for e in container(own, "sidecar")["env"]}["FTPIPELINE_REDIS_URL"]["value"] == \
        "redis://theirs:6379/0"


def test_the_stores_cas_reach_the_sidecar_alone_at_the_path_the_operators_urls_name() -> None:
    cm = render.config_map(body(), {"redis": "REDIS CA", "zookeeper": "ZK CA"})
    assert cm["data"]["redis-ca.crt"] == "REDIS CA" and cm["data"]["zookeeper-ca.crt"] == "ZK CA"
    pod = render.worker_pod(body(), "w0", "run-a", {"storeCAs": "redis,zookeeper"})
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "store-ca"]
    assert volume["configMap"]["items"] == [{"key": "redis-ca.crt", "path": "redis/ca.crt"},
                                            {"key": "zookeeper-ca.crt", "path": "zookeeper/ca.crt"}]
    [mount] = [m for m in container(pod, "sidecar")["volumeMounts"] if m["name"] == "store-ca"]
    assert mount["mountPath"] == render.STORE_CA_DIR == "/etc/ftpipeline-stores"  # the chart's storeCADir
    assert "store-ca" not in str(container(pod, "spark")), "user code needs no way to the stores"
    [document] = [v for v in pod["spec"]["volumes"] if v["name"] == "pipeline"]
    assert document["configMap"]["items"] == [{"key": "pipeline.yaml", "path": "pipeline.yaml"}]
    plain = render.worker_pod(body(), "w0", "run-a", {})
    assert not [v for v in plain["spec"]["volumes"] if v["name"] == "store-ca"]


def test_a_kafka_endpoint_from_a_secret_and_its_ca_reach_both_containers_never_as_literals() -> None:
    pod = render.worker_pod(body(kafka={"secretRef": {"name": "kafka", "key": "endpoint"},
                                        "caSecretRef": {"name": "kafka-ca", "key": "ca.pem"}}), "w0", "r", {})
    for name in ("spark", "sidecar"):  # the Spark process reads sources, the sidecar releases sinks
        c = container(pod, name)
        env = {e["name"]: e for e in c["env"]}
        assert env["FTPIPELINE_KAFKA"] == {"name": "FTPIPELINE_KAFKA",
                                           "valueFrom": {"secretKeyRef": {"name": "kafka", "key": "endpoint"}}}
        assert env["FTPIPELINE_KAFKA_CA"]["value"] == f"{render.KAFKA_CA_DIR}/ca.crt"
        assert {"name": "kafka-ca", "mountPath": render.KAFKA_CA_DIR, "readOnly": True} in c["volumeMounts"]
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "kafka-ca"]
    assert volume["secret"]["secretName"] == "kafka-ca"
    assert volume["secret"]["items"] == [{"key": "ca.pem", "path": "ca.crt"}]
    plain = render.worker_pod(body(kafka={"bootstrapServers": "k:9092"}), "w0", "r", {})
    assert not any(e["name"].startswith("FTPIPELINE_KAFKA") for c in plain["spec"]["containers"] for e in c["env"])


def test_a_delta_sink_adds_no_spark_settings_and_a_pipeline_asking_for_deltas_extension_keeps_it() -> None:
    """The sidecar commits a Delta sink's steps (delta-rs): its Spark needs no Delta; user code that reads Delta
    itself names the extension in spark.conf (the pinned jars then join the class path: worker/session.py)."""
    import json

    def conf(pod: dict) -> dict:  # type: ignore[type-arg]
        args = container(pod, "spark")["args"]
        return json.loads(args[args.index("--spark-conf") + 1])

    delta = body()
    delta["spec"]["stages"][-1]["sink"] = {"delta": {"path": "s3://lake/table"}}
    assert "spark.sql.extensions" not in conf(render.worker_pod(delta, "w0", "r", {}))
    asking = body(spark={"conf": {"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension"}})
    assert conf(render.worker_pod(asking, "w0", "r", {}))["spark.sql.extensions"] == \
        "io.delta.sql.DeltaSparkSessionExtension"


def test_the_object_stores_keys_and_ca_reach_both_containers_from_a_secret_never_as_literals() -> None:
    pod = render.worker_pod(body(objectStore={"secretRef": {"name": "s3-keys"},
                                              "caSecretRef": {"name": "s3-ca", "key": "ca.pem"}}), "w0", "r", {})
    for name in ("spark", "sidecar"):  # the Spark process writes checkpoints and parts, the sidecar releases
        c = container(pod, name)
        env = {e["name"]: e for e in c["env"]}
        for key in render.OBJECT_STORE_KEYS:
            assert env[key] == {"name": key, "valueFrom": {"secretKeyRef": {"name": "s3-keys", "key": key,
                                                                            "optional": True}}}
        assert env["AWS_CA_BUNDLE"]["value"] == f"{render.OBJECT_STORE_CA_DIR}/ca.crt"
        assert {"name": "object-store-ca", "mountPath": render.OBJECT_STORE_CA_DIR, "readOnly": True} in c["volumeMounts"]
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "object-store-ca"]
    assert volume["secret"]["items"] == [{"key": "ca.pem", "path": "ca.crt"}]
    # the operator's store: the pipeline's own keys, from the Secret the operator issued
    issued = render.worker_pod(body(), "w0", "r", {"objectStoreSecret": "clicks-object-store"})
    refs = {e["valueFrom"]["secretKeyRef"]["name"] for c in issued["spec"]["containers"] for e in c["env"]
            if e["name"].startswith("AWS_")}
    assert refs == {"clicks-object-store"}
    plain = render.worker_pod(body(), "w0", "r", {})
    assert not any(e["name"].startswith("AWS_") for c in plain["spec"]["containers"] for e in c["env"])


def test_workers_spread_over_nodes_unless_the_spec_says_otherwise() -> None:
    doc = body()
    [spread] = render.worker_pod(doc, "w0", "r1", {"redis": "redis://r:6379/0"})["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["labelSelector"]["matchLabels"] == render.worker_labels(doc["metadata"]["name"])
    zones = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
              "labelSelector": {"matchLabels": {"a": "b"}}}]
    doc["spec"].update(topologySpreadConstraints=zones, nodeSelector={"pool": "streaming"},
                        tolerations=[{"key": "dedicated", "operator": "Exists"}],
                        affinity={"nodeAffinity": {}}, priorityClassName="pipelines")
    pod = render.worker_pod(doc, "w0", "r1", {"redis": "redis://r:6379/0"})["spec"]
    assert pod["topologySpreadConstraints"] == zones and pod["nodeSelector"] == {"pool": "streaming"}
    assert pod["tolerations"][0]["key"] == "dedicated" and pod["affinity"] == {"nodeAffinity": {}}
    assert pod["priorityClassName"] == "pipelines"
    doc["spec"]["topologySpreadConstraints"] = []
    assert "topologySpreadConstraints" not in render.worker_pod(doc, "w0", "r1", {"redis": "redis://r:6379/0"})["spec"]


def test_the_disruption_budget_selects_exactly_the_worker_pods_one_at_a_time_by_default() -> None:
    doc = body()
    pdb = render.disruption_budget(doc)
    assert pdb["kind"] == "PodDisruptionBudget" and pdb["spec"]["minAvailable"] == doc["spec"]["workers"] - 1
    assert pdb["metadata"]["ownerReferences"][0]["kind"] == "FTPipeline"
    selector = ",".join(f"{k}={v}" for k, v in pdb["spec"]["selector"]["matchLabels"].items())
    assert selector == render.worker_selector(doc["metadata"]["name"])
    assert render.worker_pod(doc, "w0", "r1", {"redis": "redis://r:6379/0"})["metadata"]["labels"].items() >= \
        pdb["spec"]["selector"]["matchLabels"].items()
    doc["spec"]["disruptionBudget"] = {"maxUnavailable": 2}
    assert render.disruption_budget(doc)["spec"]["minAvailable"] == 0
