"""The kind provider: a kind cluster of the Kubernetes built here, with the project image loaded.

``up`` on a machine without a running Docker engine installs Debian's
``docker.io`` and starts the engine itself, with the registry mirror
(``mirror.py``) that lets kind build its node image offline
(``kindimage.py``). Then: ``kind create cluster`` from that image with the
default CNI off and the tests' hostPath root mounted into the node, the pod
network of ``podnet.py``, kind's StorageClass switched to a shared path so
that ReadWriteMany claims bind, and the project image (built with buildah, as
for the local provider) loaded with ``kind load``. The tests run in the node's
network namespace, as they run on the node with the local provider
(``_on_the_node`` says why); their kubeconfig is written where the local
provider writes its own::

    eval "$(python -m tests.e2e.cluster env --provider kind)"
    on-node .venv/bin/pytest tests/e2e
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from . import build, kindimage, podnet, storage
from .build import phase, run
from .config import BASE_IMAGE, HELM, KIND, KIND_APT_PACKAGES, KUBE_ROUTER, PROJECT_IMAGE, Paths, write_if_changed
from .daemons import Daemons
from .mirror import Mirror, engine_running

NAME = "ftpipeline-e2e"
NODE = f"{NAME}-control-plane"
NETNS = f"{NAME}-node"  # the node's network namespace, named on this machine
POD_CIDR = "10.244.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"  # kind's default
BRIDGE = "ftpcni0"
# Where kind's provisioner keeps volumes on its node, and the tests' hostPath root: made and read on this
# machine (the tests read a pipeline's output from its volume), so the node mounts them at the same paths.
VOLUMES = "/var/local-path-provisioner"
HOST_DATA = Path(os.environ.get("FTPIPELINE_E2E_HOSTPATH", "/var/lib/ftpipeline-e2e-data"))
POLICY_IMAGE = f"localhost/kube-router:v{KUBE_ROUTER}"


def available() -> bool:
    return bool(shutil.which("docker")) and engine_running()


class KindCluster(Daemons):
    def __init__(self, paths: Paths | None = None) -> None:
        self.paths = paths or Paths.from_env()
        self.state = self.paths.state / "kind"  # its daemons' pidfiles and logs, apart from the local provider's
        self.mirror = Mirror(self, self.paths.cache)

    @property
    def kind(self) -> str:
        return str(kindimage.ensure_kind(self.paths))

    def up(self) -> None:
        total = time.monotonic()
        build.ensure_apt()
        with phase("binaries (Go modules)"):
            build.ensure_go_binaries(self.paths)  # kubectl and helm for the tests, kube-router for the pod network
        build.ensure_apt(KIND_APT_PACKAGES)
        self.state.mkdir(parents=True, exist_ok=True)
        self.paths.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        self.mirror.start_engine(self.paths.cache / "docker")
        self.mirror.start()
        image = kindimage.node_image(self.paths, self.mirror)
        if NAME not in run(self.kind, "get", "clusters", quiet=True).split():
            with phase("kind create cluster"):
                for path in (HOST_DATA, Path(VOLUMES)):
                    path.mkdir(parents=True, exist_ok=True)
                config = self.state / "kind.yaml"
                config.write_text(json.dumps({
                    "kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4",
                    "networking": {"disableDefaultCNI": True, "podSubnet": POD_CIDR},
                    "nodes": [{"role": "control-plane", "extraMounts": [
                        {"hostPath": path, "containerPath": path} for path in (str(HOST_DATA), VOLUMES)]}]}))
                run(self.kind, "create", "cluster", "--name", NAME, "--image", image, "--config", config,
                    "--kubeconfig", self.host_kubeconfig)
        else:
            run(self.kind, "export", "kubeconfig", "--name", NAME, "--kubeconfig", self.host_kubeconfig, quiet=True)
        with phase("pod network (bridge CNI, kube-router's NetworkPolicy controller)"):
            self._pod_network()
        with phase("node Ready"):
            self.kubectl("wait", "--for=condition=Ready", f"node/{NODE}", "--timeout=180s")
        self._on_the_node()
        self._shared_storage()
        with phase("project image into the node (kind load)"):
            build.ensure_project_image(self.paths)
            self._load(PROJECT_IMAGE)
        with phase("system pods Ready"):
            self.kubectl("-n", "kube-system", "wait", "--for=condition=Ready", "pod", "--all", "--timeout=180s")
        print(f"--- kind cluster up: {time.monotonic() - total:.1f}s", flush=True)

    @property
    def host_kubeconfig(self) -> Path:
        """The provider's own kubeconfig, for this machine (the API server's port that kind publishes)."""
        return self.state / "kind-host.kubeconfig"

    def kubectl(self, *args: str) -> str:
        return run(self.paths.k8s_bin / "kubectl", "--kubeconfig", str(self.host_kubeconfig), *args, quiet=True)

    def _load(self, image: str) -> None:
        kindimage.to_docker(image)
        run(self.kind, "load", "docker-image", image, "--name", NAME, quiet=True)

    def _pod_cidr(self) -> str:
        """The node's pod CIDR, once kube-controller-manager has allocated it."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            cidr = self.kubectl("get", "node", NODE, "-o", "jsonpath={.spec.podCIDR}").strip()
            if cidr:
                return cidr
            time.sleep(1)
        raise TimeoutError(f"node {NODE} got no pod CIDR in 120s")

    def _pod_network(self) -> None:
        subprocess.run(["docker", "exec", "-i", NODE, "sh", "-c", "cat > /etc/cni/net.d/10-ftpipeline.conflist"],
                       input=podnet.conflist(BRIDGE, self._pod_cidr()), text=True, check=True)
        run("docker", "exec", NODE, "sh", "-c", podnet.service_guard(BRIDGE, SERVICE_CIDR), quiet=True)
        if not kindimage.docker_has(POLICY_IMAGE):  # kube-router: built by up's ensure_go_binaries
            build.ensure_base(self.paths)
            binary = self.paths.bin("kube-router", KUBE_ROUTER) / "kube-router"
            kindimage.one_binary_image(POLICY_IMAGE, {"/usr/local/bin/kube-router": binary}, base=BASE_IMAGE,
                                       packages=("iptables", "ipset", "iproute2", "kmod"))
        self._load(POLICY_IMAGE)
        manifest = self.state / "kube-router.json"
        manifest.write_text(podnet.policy_controller(POLICY_IMAGE))
        self.kubectl("apply", "-f", str(manifest))

    def _on_the_node(self) -> None:
        """The tests run in the node's network namespace, where the local provider's run: on the node.

        Their clients reach pods and Services from the node (a Kafka broker by its pod IP, the chart's Redis
        by its ClusterIP, Prometheus scraping pods), which NetworkPolicy lets through as it lets kubelet's
        probes. From this machine, outside the node, the chart's policies would refuse them, as they refuse
        any other client. So ``up`` names the node's network namespace (``ip netns attach``) and writes the
        tests' kubeconfig with the API server's address there.
        """
        pid = run("docker", "inspect", "-f", "{{.State.Pid}}", NODE, quiet=True).strip()
        subprocess.run(["ip", "netns", "delete", NETNS], capture_output=True)
        run("ip", "netns", "attach", NETNS, pid)
        config = self.host_kubeconfig.read_text()
        server = next(line.split("server:", 1)[1].strip() for line in config.splitlines() if "server:" in line)
        write_if_changed(self.paths.kubeconfig, config.replace(server, "https://127.0.0.1:6443"))
        self.paths.kubeconfig.chmod(0o600)

    def _shared_storage(self) -> None:
        """kind's provisioner config with sharedFileSystemPath instead of nodePathMap (one node shares it trivially)."""
        ns = ("-n", storage.NAMESPACE)
        patch = json.dumps({"data": {"config.json": storage.shared_config(VOLUMES)}})
        out = self.kubectl(*ns, "patch", "configmap", storage.CONFIGMAP, "--type", "merge", "-p", patch)
        if "no change" not in out:  # the provisioner reads its config at start; restart it rather than wait
            self.kubectl(*ns, "rollout", "restart", "deployment/local-path-provisioner")
            self.kubectl(*ns, "rollout", "status", "deployment/local-path-provisioner", "--timeout", "120s")

    def down(self) -> None:
        if available():
            run(self.kind, "delete", "cluster", "--name", NAME, quiet=True)
        subprocess.run(["ip", "netns", "delete", NETNS], capture_output=True)
        shutil.rmtree(VOLUMES, ignore_errors=True)  # cluster state, gone with the cluster (the tests' own stays)
        self.mirror.stop()
        self.paths.kubeconfig.unlink(missing_ok=True)
        self.host_kubeconfig.unlink(missing_ok=True)

    def status(self) -> str:
        return self.kubectl("get", "nodes", "-o", "wide")

    def env(self) -> str:
        """The local provider's (kubectl and helm built here), with kind beside them, and ``on-node`` to run
        a command where the tests run (``_on_the_node``): ``on-node .venv/bin/pytest tests/e2e``."""
        p = self.paths
        return (f"export KUBECONFIG={p.kubeconfig} PATH={p.k8s_bin}:{p.bin('helm', HELM)}:{p.bin('kind', KIND)}:$PATH\n"
                f'on-node() {{ ip netns exec {NETNS} "$@"; }}')
