"""The Helm chart: it lints, renders, refuses unknown values, and installs the CRD it was generated with.

Needs only the ``helm`` binary (``python -m tests.e2e.cluster env`` puts one on PATH).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "ftpipeline"

pytestmark = pytest.mark.skipif(shutil.which("helm") is None, reason="no helm on PATH")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["helm", *args], capture_output=True, text=True, check=check)


def render(*sets: str) -> list[dict[str, object]]:
    args = [a for s in sets for a in ("--set", s)]
    out = helm("template", "t", str(CHART), "--namespace", "ns", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_helm_lint_is_clean() -> None:
    result = helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in result.stdout, result.stdout + result.stderr


def test_a_misspelt_value_is_refused_naming_it() -> None:
    result = helm("template", "t", str(CHART), "--set", "redis.enabld=true", check=False)
    assert result.returncode != 0
    assert "enabld" in result.stderr


def test_template_renders_the_generated_crd_kept_on_uninstall() -> None:
    docs = render()
    ours = {d["metadata"]["name"]: d for d in docs  # type: ignore[index]
            if d["kind"] == "CustomResourceDefinition" and d["spec"]["group"] == "ftpipeline.io"}  # type: ignore[index]
    assert ours == {"ftpipelines.ftpipeline.io": yaml.safe_load((ROOT / "crds" / "ftpipeline.yaml").read_text()),
                    "ftpipelinecheckpoints.ftpipeline.io":
                        yaml.safe_load((ROOT / "crds" / "ftpipelinecheckpoint.yaml").read_text())}
    assert all(crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for crd in ours.values())
    assert not [d for d in render("crds.enabled=false") if d["kind"] == "CustomResourceDefinition"]


def test_pods_are_non_root_with_read_only_root_filesystems() -> None:
    for doc in render():
        if doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, doc["metadata"]


def test_external_endpoints_replace_the_in_chart_servers() -> None:
    docs = render("redis.enabled=false", "zookeeper.enabled=false", "redis.externalUrl=redis://r:6379/0",
                  "zookeeper.externalConnect=z:2181", "redis.auth.existingSecret=redis-admin", "zookeeper.auth.existingSecret=zk-super")
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    assert names == {"t-ftpipeline-operator"}
    [op] = [d for d in docs if d["kind"] == "Deployment"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in op["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["FTPIPELINE_DEFAULT_REDIS_URL"] == "redis://r:6379/0"
    assert env["FTPIPELINE_REDIS_ADMIN_PASSWORD"] == {"secretKeyRef": {"name": "redis-admin", "key": "password"}}
    assert env["FTPIPELINE_DEFAULT_ZOOKEEPER"] == "z:2181"
    assert not [d for d in docs if d["kind"] == "Secret"], "the chart generates no password it does not serve"
    # an external Redis with auth on must name its admin password; a URL carrying one is refused
    refused = helm("template", "t", str(CHART), "--set", "redis.enabled=false,redis.externalUrl=redis://r:6379/0",
                   check=False)
    assert refused.returncode != 0 and "redis.auth.existingSecret" in refused.stderr
    leaky = helm("template", "t", str(CHART), "--set", "redis.enabled=false,redis.auth.enabled=false",
                 "--set", "redis.externalUrl=redis://:pw@r:6379/0", check=False)
    assert leaky.returncode != 0 and "externalUrl" in leaky.stderr


def test_redis_and_zookeeper_require_credentials_by_default_which_only_they_and_the_operator_read() -> None:
    docs = render()
    secrets = {d["metadata"]["name"] for d in docs if d["kind"] == "Secret" and d["type"] == "Opaque"}
    assert secrets == {"t-ftpipeline-redis-auth", "t-ftpipeline-zookeeper-auth"}
    for store, flag in (("redis", "--admin-password-file"), ("zookeeper", "--super-password-file")):
        readers = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment" and f"t-ftpipeline-{store}-auth" in str(d)}
        assert readers == {"t-ftpipeline-operator", f"t-ftpipeline-{store}"}
        [server] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == f"t-ftpipeline-{store}"]
        assert flag in server["spec"]["template"]["spec"]["containers"][0]["command"]


def test_redis_and_zookeeper_serve_tls_alone_by_default_and_the_operator_holds_only_their_cas() -> None:
    docs = render()
    deployments = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment"}
    op = deployments["t-ftpipeline-operator"]
    env = {e["name"]: e.get("value") for e in op["containers"][0]["env"]}
    assert env["FTPIPELINE_DEFAULT_REDIS_URL"] == \
        "rediss://t-ftpipeline-redis.ns.svc:6379/0?ssl_ca_certs=/etc/ftpipeline-stores/redis/ca.crt"
    assert env["FTPIPELINE_DEFAULT_ZOOKEEPER"] == "t-ftpipeline-zookeeper.ns.svc:2181?ca=/etc/ftpipeline-stores/zookeeper/ca.crt"
    for store in ("redis", "zookeeper"):
        [secret] = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == f"t-ftpipeline-{store}-tls"]
        assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
        [ca] = [v for v in op["volumes"] if v["name"] == f"{store}-ca"]
        assert ca["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}], "the operator never mounts a server's key"
        server = deployments[f"t-ftpipeline-{store}"]
        [tls] = [v for v in server["volumes"] if v["name"] == "tls"]
        assert tls["secret"]["secretName"] == f"t-ftpipeline-{store}-tls"
        container = server["containers"][0]
        assert f"/etc/ftpipeline-{store}-tls" in container["command"]
        assert "exec" in container["readinessProbe"], "a TCP probe of a TLS port would be a failed handshake logged"
    plain = render("redis.tls.enabled=false", "zookeeper.tls.enabled=false")
    assert not [d for d in plain if d["kind"] == "Secret" and d["type"] == "kubernetes.io/tls"]
    [op] = [d for d in plain if d["kind"] == "Deployment" and d["metadata"]["name"] == "t-ftpipeline-operator"]
    env = {e["name"]: e.get("value") for e in op["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["FTPIPELINE_DEFAULT_REDIS_URL"] == "redis://t-ftpipeline-redis.ns.svc:6379/0"
    assert env["FTPIPELINE_DEFAULT_ZOOKEEPER"] == "t-ftpipeline-zookeeper.ns.svc:2181"
    # your own certificates (cert-manager's, a company CA): nothing generated, the server mounts yours
    own = render("redis.tls.existingSecret=my-redis-cert", "zookeeper.tls.existingSecret=my-zk-cert")
    assert not [d for d in own if d["kind"] == "Secret" and d["type"] == "kubernetes.io/tls"]
    [server] = [d for d in own if d["kind"] == "Deployment" and d["metadata"]["name"] == "t-ftpipeline-redis"]
    assert "my-redis-cert" in str(server["spec"]["template"]["spec"]["volumes"])


def test_the_operator_runs_its_image_for_pipelines_without_one_and_mounts_no_pipeline_storage() -> None:
    docs = render("image.repository=localhost/ftpipeline", "image.tag=e2e", "image.pullPolicy=Never")
    [op] = [d for d in docs if d["kind"] == "Deployment" and "operator" in d["metadata"]["name"]]
    pod = op["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["FTPIPELINE_DEFAULT_IMAGE"] == "localhost/ftpipeline:e2e"
    assert env["FTPIPELINE_DEFAULT_IMAGE_PULL_POLICY"] == "Never"
    assert [v["name"] for v in pod["volumes"]] == ["tmp", "redis-ca", "zookeeper-ca"]  # and the stores' CAs
    refused = helm("template", "t", str(CHART), "--set", "operator.volumes[0].name=data", check=False)
    assert refused.returncode != 0 and "volumes" in refused.stderr


def test_dashboard_and_prometheus_operator_objects() -> None:
    import json

    docs = render()
    [dash] = [d for d in docs if d["kind"] == "ConfigMap"]
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dash["data"]["ftpipeline.json"])["uid"] == "ftpipeline"
    assert not {"ServiceMonitor", "PodMonitor", "PrometheusRule"} & {str(d["kind"]) for d in docs}
    kinds = {str(d["kind"]) for d in render("serviceMonitor.enabled=true", "prometheusRule.enabled=true")}
    assert {"ServiceMonitor", "PodMonitor", "PrometheusRule"} <= kinds


def _server(docs: list[dict[str, object]], component: str) -> tuple[dict, list[dict]]:
    [deploy] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == f"t-ftpipeline-{component}"]
    claims = [d for d in docs if d["kind"] == "PersistentVolumeClaim" and component in d["metadata"]["name"]]
    return deploy, claims


def test_redis_keeps_an_append_only_file_and_zookeeper_its_data_on_claims_by_default() -> None:
    """A restarted or rescheduled Redis keeps the lineage (runs pause, never roll back), and a deleted
    ZooKeeper pod keeps the command logs and committed checkpoints."""
    docs = render()
    for component in ("redis", "zookeeper"):
        deploy, [claim] = _server(docs, component)
        [volume] = [v for v in deploy["spec"]["template"]["spec"]["volumes"] if v["name"] == "data"]
        assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
        assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
        assert "storageClassName" not in claim["spec"]  # the cluster's default class
    redis, _ = _server(docs, "redis")
    command = redis["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--appendonly" in command and command[command.index("--appendfsync") + 1] == "everysec"
    redis, _ = _server(render("redis.appendfsync=always"), "redis")
    command = redis["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--appendfsync") + 1] == "always"
    assert helm("template", "t", str(CHART), "--set", "redis.appendfsync=sometimes", check=False).returncode != 0
    ephemeral = render("redis.appendonly=false", "redis.persistence.enabled=false",
                       "zookeeper.persistence.storageClass=fast")
    redis, claims = _server(ephemeral, "redis")
    assert claims == [] and "--appendonly" not in redis["spec"]["template"]["spec"]["containers"][0]["command"]
    assert {"name": "data", "emptyDir": {}} in redis["spec"]["template"]["spec"]["volumes"]
    _, [zk_claim] = _server(ephemeral, "zookeeper")
    assert zk_claim["spec"]["storageClassName"] == "fast"
    assert helm("template", "t", str(CHART), "--set", "redis.persistence.size=lots", check=False).returncode != 0


def test_the_stores_take_a_placement_and_leave_a_lost_node_after_their_toleration() -> None:
    """Redis and ZooKeeper are single pods: one on a node that stopped answering is evicted after
    nodeLostTolerationSeconds (30 by default, not Kubernetes' 300) and starts on another node."""
    lost = [{"effect": "NoExecute", "key": f"node.kubernetes.io/{k}", "operator": "Exists", "tolerationSeconds": 30}
            for k in ("not-ready", "unreachable")]
    for component in ("redis", "zookeeper"):
        deploy, _ = _server(render(), component)
        pod = deploy["spec"]["template"]["spec"]
        assert pod["tolerations"] == lost and "nodeSelector" not in pod and "affinity" not in pod
        deploy, _ = _server(render(f"{component}.nodeSelector.pool=stores", f"{component}.nodeLostTolerationSeconds=0",
                                   f"{component}.tolerations[0].key=dedicated",
                                   f"{component}.tolerations[0].operator=Exists"), component)
        pod = deploy["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"pool": "stores"}
        assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]  # 0: Kubernetes' own default
    assert helm("template", "t", str(CHART), "--set", "redis.nodeLostTolerationSeconds=-1", check=False).returncode != 0


def _secret_grants(docs: list[dict[str, object]]) -> dict[tuple[str, str], list[str]]:
    """(kind, namespace) of each role that grants access to pipelines' Secrets, with its verbs (not the
    operator's own role for its webhook certificate: ``test_the_webhook_certificate_role_reads_one_secret``)."""
    out = {}
    for d in docs:
        if d["kind"] in ("ClusterRole", "Role") and not str(d["metadata"]["name"]).endswith("-operator"):  # type: ignore[index]
            for rule in d["rules"]:  # type: ignore[attr-defined]
                if "secrets" in rule["resources"]:
                    out[(str(d["kind"]), str(d["metadata"].get("namespace", "")))] = rule["verbs"]  # type: ignore
    return out


def test_default_values_grant_secrets_in_the_release_namespace_alone() -> None:
    docs = render()
    assert _secret_grants(docs) == {("Role", "ns"): ["get", "create", "update"]}
    assert not [d for d in docs if d["kind"] == "ClusterRoleBinding" and "secrets" in str(d)]
    [deployment] = [d for d in docs if d["kind"] == "Deployment" and "operator" in str(d["metadata"])]
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]  # type: ignore[index]
    assert "--namespace=ns" in command and "--all-namespaces" not in command


def test_the_webhook_certificate_role_reads_one_secret_in_the_release_namespace() -> None:
    """The replicas share the webhook's certificate through one Secret: the operator may create Secrets in its
    own namespace and read that one alone, whatever it watches, and read its own Deployment (the Secret's
    owner, so that it goes with the release)."""
    for docs in (render(), render("watchNamespaces={team-a}")):
        [role] = [d for d in docs if d["kind"] == "Role" and str(d["metadata"]["name"]).endswith("-operator")]  # type: ignore[index]
        assert role["metadata"]["namespace"] == "ns"  # type: ignore[index]
        assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
                                 {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                                  "resourceNames": ["t-ftpipeline-webhook-tls"]},
                                 {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"],
                                  "resourceNames": ["t-ftpipeline-operator"]}]
        env = _operator_env(docs)
        assert _operator_env(docs, "webhook")["FTPIPELINE_WEBHOOK_SECRET"] == "ns/t-ftpipeline-webhook-tls"
        assert env["FTPIPELINE_OPERATOR_DEPLOYMENT"] == "ns/t-ftpipeline-operator"
        assert env["FTPIPELINE_OWNER_CLUSTERROLE"] == "t-ftpipeline"


def test_two_replicas_roll_without_downtime_and_peer_under_a_name_of_their_release() -> None:
    [one] = [d for d in render() if d["kind"] == "Deployment" and "operator" in str(d["metadata"])]
    [two] = [d for d in render("operator.replicas=2") if d["kind"] == "Deployment" and "operator" in str(d["metadata"])]
    assert one["spec"]["replicas"] == 1 and one["spec"]["strategy"]["type"] == "Recreate"  # type: ignore[index]
    assert two["spec"]["replicas"] == 2 and two["spec"]["strategy"]["type"] == "RollingUpdate"  # type: ignore[index]
    assert _operator_env(render())["FTPIPELINE_PEERING"] == "ns.t-ftpipeline"
    crds = {d["metadata"]["name"] for d in render() if d["kind"] == "CustomResourceDefinition"}  # type: ignore[index]
    assert crds == {"ftpipelines.ftpipeline.io", "ftpipelinecheckpoints.ftpipeline.io", "clusterkopfpeerings.kopf.dev"}


def test_listed_namespaces_each_get_a_role_and_only_a_star_gets_cluster_wide_access() -> None:
    listed = render("watchNamespaces={team-a,team-b}")
    assert set(_secret_grants(listed)) == {("Role", "team-a"), ("Role", "team-b")}
    assert set(_secret_grants(render("watchNamespaces={*}"))) == {("ClusterRole", "")}
    assert helm("template", "t", str(CHART), "--set", "watchNamespaces={Bad_Name}", check=False).returncode != 0


def test_the_webhook_configuration_points_at_the_operator_and_fails_closed() -> None:
    docs = render()
    [config] = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    [hook] = config["webhooks"]  # type: ignore[misc]
    assert hook["failurePolicy"] == "Fail" and hook["clientConfig"]["service"]["path"] == "/validate"
    assert "object.spec != oldObject.spec" in hook["matchConditions"][0]["expression"]
    [service] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == hook["clientConfig"]["service"]["name"]]  # type: ignore[index]
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"  # type: ignore[index]
    assert not [d for d in render("webhook.enabled=false") if d["kind"] == "ValidatingWebhookConfiguration"]


def _containers(docs: list[dict[str, object]]) -> dict[str, dict[str, Any]]:
    [operator] = [d for d in docs if d["kind"] == "Deployment"
                  and d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "operator"]
    return {c["name"]: c for c in operator["spec"]["template"]["spec"]["containers"]}  # type: ignore[index]


def _operator_env(docs: list[dict[str, object]], container: str = "operator") -> dict[str, object]:
    return {e["name"]: e.get("value") for e in _containers(docs)[container].get("env", [])}


def test_the_webhook_is_a_process_of_its_own_beside_the_operator() -> None:
    containers = _containers(render())
    assert containers["webhook"]["command"][:4] == ["kopf", "run", "--standalone", "--all-namespaces"]
    assert "ftpipeline_operator.webhook" in containers["webhook"]["command"]
    ports = {c: {p["name"] for p in spec["ports"]} for c, spec in containers.items()}
    assert "webhook" in ports["webhook"] and "webhook" not in ports["operator"]
    assert containers["webhook"]["resources"]["requests"]["cpu"]
    assert set(_containers(render("webhook.enabled=false"))) == {"operator"}


def test_the_kafka_broker_is_optional_and_only_the_operator_and_the_workers_reach_it() -> None:
    assert not [d for d in render() if "kafka" in d["metadata"]["name"]]
    assert "FTPIPELINE_DEFAULT_KAFKA" not in _operator_env(render())
    docs = render("kafka.enabled=true")
    broker, [claim] = _server(docs, "kafka")
    container = broker["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["ftpipeline", "serve-kafka"]
    assert container["command"][container["command"].index("--advertise") + 1] == "$(POD_IP)"
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert _operator_env(docs)["FTPIPELINE_DEFAULT_KAFKA"] == "t-ftpipeline-kafka.ns.svc:9092"
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "t-ftpipeline-kafka"]
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 9092}]
    assert policy["spec"]["ingress"][0]["from"]  # not open: the workers and the operator alone
    external = _operator_env(render("kafka.externalBootstrapServers=k1:9092\\,k2:9092"))
    assert external["FTPIPELINE_DEFAULT_KAFKA"] == "k1:9092,k2:9092"


def test_zookeeper_as_an_ensemble_spreads_its_members_and_clients_name_every_one() -> None:
    """zookeeper.replicas 3: a StatefulSet whose members start together, spread over nodes, find each other
    by name before they are ready, and are drained one at a time; clients list every member, whose names the
    generated certificate covers; only members reach the quorum ports. 2 (no majority survives a loss) is
    refused."""
    docs = render("zookeeper.replicas=3", "networkPolicy.enabled=true")
    [members] = [d for d in docs if d["kind"] == "StatefulSet"]
    spec = members["spec"]
    assert spec["replicas"] == 3 and spec["podManagementPolicy"] == "Parallel"
    pod = spec["template"]["spec"]
    [term] = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    command = pod["containers"][0]["command"]
    names = [f"t-ftpipeline-zookeeper-{i}.t-ftpipeline-zookeeper-members.ns.svc" for i in range(3)]
    assert command[command.index("--servers") + 1] == ",".join(names)
    [headless] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-members")]
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    [budget] = [d for d in docs if d["kind"] == "PodDisruptionBudget" and "zookeeper" in d["metadata"]["name"]]
    assert budget["spec"]["maxUnavailable"] == 1
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim" and "zookeeper" in d["metadata"]["name"]]
    assert [t["metadata"]["name"] for t in spec["volumeClaimTemplates"]] == ["data"]
    assert spec["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"  # as the standalone's claim
    [connect] = [e["value"] for d in docs if d["kind"] == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]
                 for e in c.get("env", []) if e["name"] == "FTPIPELINE_DEFAULT_ZOOKEEPER"]
    assert connect.split("?")[0] == ",".join(f"{n}:2181" for n in names)
    import base64

    from cryptography import x509

    [secret] = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "t-ftpipeline-zookeeper-tls"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "*.t-ftpipeline-zookeeper-members.ns.svc" in sans
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "t-ftpipeline-zookeeper"]
    quorum = [r for r in policy["spec"]["ingress"] if {"port": 3888, "protocol": "TCP"} in r["ports"]]
    assert [r["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for r in quorum] == ["zookeeper"]
    assert not [d for d in render() if d["kind"] == "StatefulSet"], "one member stays a Deployment"
    refused = helm("template", "t", str(CHART), "--set", "zookeeper.replicas=2", check=False)
    assert refused.returncode != 0 and "zookeeper.replicas" in refused.stderr
