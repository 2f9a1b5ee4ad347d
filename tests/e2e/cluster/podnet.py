"""The pod network both providers give their node: one CNI bridge, and NetworkPolicy from kube-router.

The CNI bridge plugin with host-local addresses from the node's pod CIDR
(Debian's plugins), and kube-router's NetworkPolicy controller alone (no
routing, no service proxy). The local provider runs kube-router as a process
of this machine; the kind provider as a DaemonSet on the host network of kind's
node, whose own CNI (kindnetd) is not built here (``kindimage.py``), so its
clusters are created with ``disableDefaultCNI``. The tests that cut pods off
from each other behave the same on both.
"""

from __future__ import annotations

import json
from typing import Any

SERVICE_ROUTES = "1096"  # the routing table (and rule priority) that makes a pod's unrewritten ClusterIP unreachable
NAMESPACE = "kube-system"
NAME = "kube-router"
HEALTH_PORT = 20244


def conflist(bridge: str, pod_cidr: str, ipam_dir: str | None = None, masquerade: bool = True) -> str:
    """The node's CNI configuration. ``masquerade``: the bridge plugin rewrites what its pods send beyond their own
    subnet (one node); with several nodes ``masquerade_rule`` does it once for the cluster's pod range instead, so a
    pod reaching a pod of another node keeps its own address (NetworkPolicy judges by it)."""
    ipam: dict[str, Any] = {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}]}
    if ipam_dir:
        ipam["dataDir"] = ipam_dir
    return json.dumps({
        "cniVersion": "0.4.0",
        "name": "ftpipeline-e2e",
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": masquerade, "hairpinMode": True, "ipam": ipam},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=2)


MASQUERADE_CHAIN = "CNI-FTP-MASQ"  # "CNI-": removed with the CNI plugins' own chains on down


def masquerade_rule(cluster_cidr: str) -> str:
    """A shell script for the machine: what a pod of any node sends outside the cluster's pod range is
    masqueraded, what it sends to another pod is not."""
    c = MASQUERADE_CHAIN
    return (f"iptables -t nat -N {c} 2>/dev/null; iptables -t nat -F {c} && "
            f"iptables -t nat -A {c} -d {cluster_cidr} -j RETURN && "
            f"iptables -t nat -A {c} ! -d 224.0.0.0/4 -j MASQUERADE && "
            f"{{ iptables -t nat -C POSTROUTING -s {cluster_cidr} -j {c} 2>/dev/null || "
            f"iptables -t nat -A POSTROUTING -s {cluster_cidr} -j {c}; }}")


def service_guard(bridge: str, service_cidr: str) -> str:
    """A shell script for the node: a pod's packet to a ClusterIP that kube-proxy did not rewrite fails.

    A ClusterIP is only ever rewritten to a pod by kube-proxy. A pod's packet to one that is not (its Service
    has no ready endpoint: Redis restarting) must fail on the node, as on any cluster, not follow the default
    route out of this machine, where whatever answers (an egress proxy's "HTTP/1.1 400") looks like a broken
    server. Only traffic from the pod bridge: the node's own (the API server calling a webhook) is rewritten
    after its route is chosen, which an unreachable route would refuse first.
    """
    return (f"ip route replace unreachable {service_cidr} table {SERVICE_ROUTES} && "
            f"{{ ip rule show | grep 'lookup {SERVICE_ROUTES}' | grep -q 'iif {bridge}\\b' || "
            f"ip rule add iif {bridge} to {service_cidr} lookup {SERVICE_ROUTES} priority {SERVICE_ROUTES}; }}")


def policy_controller(image: str) -> str:
    """kube-router's firewall as a DaemonSet, with the read access it needs, as one List."""
    labels = {"app.kubernetes.io/name": NAME}
    rules = [
        {"apiGroups": [""], "resources": ["namespaces", "pods", "services", "nodes", "endpoints"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
    ]
    container: dict[str, Any] = {
        "name": NAME, "image": image, "imagePullPolicy": "Never",
        "command": ["kube-router", "--run-router=false", "--run-firewall=true", "--run-service-proxy=false",
                    "--hostname-override=$(NODE_NAME)", f"--health-port={HEALTH_PORT}", "--v=1"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "securityContext": {"privileged": True},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": HEALTH_PORT}, "initialDelaySeconds": 10},
        "volumeMounts": [{"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": True},
                         {"name": "xtables-lock", "mountPath": "/run/xtables.lock"}],
    }
    items: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": NAME}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": NAME},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
         "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
             "serviceAccountName": NAME, "hostNetwork": True, "priorityClassName": "system-node-critical",
             "tolerations": [{"operator": "Exists"}], "containers": [container],
             "volumes": [{"name": "lib-modules", "hostPath": {"path": "/lib/modules"}},
                         {"name": "xtables-lock", "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"}}],
         }}}},
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2)
