"""The kind provider: a kind cluster of the Kubernetes built here, with the project image loaded.

``up`` on a machine without a running Docker engine installs Debian's
``docker.io`` and starts the engine itself, with the registry mirror
(``mirror.py``) that lets kind build its node image offline
(``kindimage.py``). Then: ``kind create cluster`` from that image with the
default CNI off, the pod network of ``podnet.py``, a route from this machine
to the pod network through the node (the tests and their Prometheus reach pods
by IP, as on the local provider), kind's StorageClass switched to a shared
path so that ReadWriteMany claims bind, and the project image (built with
buildah, as for the local provider) loaded with ``kind load``. The kubeconfig
is written where the local provider writes its own, so ``env`` and the tests
do not change.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

from . import build, kindimage, podnet, storage
from .build import phase, run
from .config import BASE_IMAGE, KIND_APT_PACKAGES, KUBE_ROUTER, PROJECT_IMAGE, Paths
from .daemons import Daemons
from .mirror import Mirror, engine_running

NAME = "ftpipeline-e2e"
NODE = f"{NAME}-control-plane"
POD_CIDR = "10.244.0.0/16"
VOLUMES = "/var/local-path-provisioner"  # where kind's provisioner keeps volumes on its node
POLICY_IMAGE = f"localhost/kube-router:v{KUBE_ROUTER}"


def available() -> bool:
    return bool(shutil.which("docker")) and engine_running()


class KindCluster(Daemons):
    def __init__(self, paths: Paths | None = None) -> None:
        self.paths = paths or Paths.from_env()
        self.state = self.paths.state
        self.mirror = Mirror(self, self.paths.cache)

    @property
    def kind(self) -> str:
        return str(kindimage.ensure_kind(self.paths))

    def up(self) -> None:
        total = time.monotonic()
        build.ensure_apt()
        missing = [p for p in KIND_APT_PACKAGES if not shutil.which({"docker.io": "dockerd", "docker-registry":
                                                                     "docker-registry", "dnsmasq": "dnsmasq"}[p])]
        if missing:
            with phase(f"apt-get install {' '.join(missing)}"):
                run("apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing, quiet=True)
        self.state.mkdir(parents=True, exist_ok=True)
        self.mirror.start_engine(self.paths.cache / "docker")
        self.mirror.start()
        image = kindimage.node_image(self.paths, self.mirror)
        if NAME not in run(self.kind, "get", "clusters", quiet=True).split():
            with phase("kind create cluster"):
                config = self.state / "kind.yaml"
                config.write_text(json.dumps({
                    "kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4",
                    "networking": {"disableDefaultCNI": True, "podSubnet": POD_CIDR},
                    "nodes": [{"role": "control-plane"}]}))
                run(self.kind, "create", "cluster", "--name", NAME, "--image", image, "--config", config,
                    "--kubeconfig", self.paths.kubeconfig, "--retain")
        else:
            run(self.kind, "export", "kubeconfig", "--name", NAME, "--kubeconfig", self.paths.kubeconfig, quiet=True)
        with phase("pod network (bridge CNI, kube-router's NetworkPolicy controller)"):
            self._pod_network()
        with phase("node Ready"):
            self.kubectl("wait", "--for=condition=Ready", f"node/{NODE}", "--timeout=180s")
        self._route_to_pods()
        self._shared_storage()
        with phase("project image into the node (kind load)"):
            build.ensure_project_image(self.paths)
            self._load(PROJECT_IMAGE)
        with phase("system pods Ready"):
            self.kubectl("-n", "kube-system", "wait", "--for=condition=Ready", "pod", "--all", "--timeout=180s")
        print(f"--- kind cluster up: {time.monotonic() - total:.1f}s", flush=True)

    def kubectl(self, *args: str) -> str:
        return run("kubectl", "--kubeconfig", str(self.paths.kubeconfig), *args, quiet=True)

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
                       input=podnet.conflist("ftpcni0", self._pod_cidr()), text=True, check=True)
        if not kindimage._docker_has(POLICY_IMAGE):
            build.ensure_go_binaries(self.paths)
            build.ensure_base(self.paths)
            binary = self.paths.bin("kube-router", KUBE_ROUTER) / "kube-router"
            kindimage._image(POLICY_IMAGE, {"/usr/local/bin/kube-router": binary}, base=BASE_IMAGE,
                             packages=("iptables", "ipset", "iproute2", "kmod"))
        self._load(POLICY_IMAGE)
        manifest = self.state / "kube-router.json"
        manifest.write_text(podnet.policy_controller(POLICY_IMAGE))
        self.kubectl("apply", "-f", str(manifest))

    def _node_ip(self) -> str:
        return run("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", NODE,
                   quiet=True).strip()

    def _route_to_pods(self) -> None:
        run("ip", "route", "replace", POD_CIDR, "via", self._node_ip())

    def _shared_storage(self) -> None:
        """kind's provisioner config with sharedFileSystemPath instead of nodePathMap (one node shares it trivially)."""
        kubectl = ("-n", storage.NAMESPACE)
        patch = json.dumps({"data": {"config.json": storage.shared_config(VOLUMES)}})
        out = self.kubectl(*kubectl, "patch", "configmap", storage.CONFIGMAP, "--type", "merge", "-p", patch)
        if "no change" not in out:  # the provisioner reads its config at start; restart it rather than wait
            self.kubectl(*kubectl, "rollout", "restart", "deployment/local-path-provisioner")
            self.kubectl(*kubectl, "rollout", "status", "deployment/local-path-provisioner", "--timeout", "120s")

    def down(self) -> None:
        if available():
            run(self.kind, "delete", "cluster", "--name", NAME, quiet=True)
        subprocess.run(["ip", "route", "del", POD_CIDR], capture_output=True)
        self.mirror.stop()
        self.paths.kubeconfig.unlink(missing_ok=True)

    def status(self) -> str:
        return self.kubectl("get", "nodes", "-o", "wide")

    def env(self) -> str:
        return f"export KUBECONFIG={self.paths.kubeconfig}"
