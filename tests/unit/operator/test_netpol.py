"""A pipeline's worker NetworkPolicy: its peers and the operator reach the Flight port, anyone the metrics."""

from __future__ import annotations

from ftpipeline_operator import netpol, render

from .test_render import body

OPERATOR = netpol.OperatorPods("ops", {"app.kubernetes.io/instance": "ftp", "app.kubernetes.io/component": "operator"})


def test_the_flight_port_admits_the_pipelines_own_workers_and_the_operator_alone() -> None:
    policy = netpol.worker_policy(body(), OPERATOR)
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == {render.PIPELINE_LABEL: "clicks", "app.kubernetes.io/component": "worker"}
    assert spec["policyTypes"] == ["Ingress"], "egress stays open"
    [flight] = [r for r in spec["ingress"] if r["ports"][0]["port"] == render.FLIGHT_PORT]
    peers, operator = flight["from"]
    assert peers == {"podSelector": spec["podSelector"]}, "same namespace: no namespaceSelector"
    assert operator["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "ops"}
    assert operator["podSelector"]["matchLabels"] == OPERATOR.labels
    [metrics] = [r for r in spec["ingress"] if r["ports"][0]["port"] == render.METRICS_PORT]
    assert "from" not in metrics
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "1234", "deleted with its pipeline"


def test_without_the_operators_identity_no_policy_is_rendered() -> None:
    assert netpol.OperatorPods.from_env({}) is None
    pods = netpol.OperatorPods.from_env({"FTPIPELINE_OPERATOR_NAMESPACE": "ops",
                                         "FTPIPELINE_OPERATOR_LABELS": '{"a": "b"}'})
    assert pods == netpol.OperatorPods("ops", {"a": "b"})
