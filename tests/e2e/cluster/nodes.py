"""The local provider's nodes beyond the first: a node pool whose nodes can be stopped, frozen and drained.

Production clusters have several nodes, and a node lost takes several pods at once. The local
provider's first node (``ftp-node``: control plane, stores, operator) runs as it always did;
``up --nodes N`` adds N-1 nodes named ``ftp-node-<i>``, each a kubelet and a containerd of its
own on this machine, registered with the label and ``NoSchedule`` taint ``POOL`` (a dedicated
pool, as platform teams keep one for their data pipelines): only a pod that tolerates the
taint runs there, so every other test's pods stay on the first node and a test that stops a
pool node loses exactly what it placed there.

Each pool node has:

- its own containerd (root in the cache, so imported images survive ``down``; state, socket) and
  CNI bridge ``ftpcni<i>`` with pod subnet ``10.244.<i>.0/24``. Pod addresses are routed between
  the bridges by this machine; nothing is masqueraded between pods (``podnet.masquerade``), so
  NetworkPolicy sees a pod's own address from every node;
- its own kubelet: ports ``10350+i`` (API) and ``10360+i`` (healthz), client certificate
  ``system:node:ftp-node-<i>``, root directory, and ``cgroupRoot`` ``/ftp-node-<i>``: a kubelet
  removes the pod cgroups below its own root that belong to no pod of its, so two kubelets
  sharing one root would kill each other's pods;
- a mount namespace of its own for the kubelet and containerd, where ``/var/log/pods`` and
  ``/var/log/containers`` are directories of the node: a kubelet deletes the log directories of
  pods it does not know;
- the same node address as the first node (every node is this machine): kube-proxy, CoreDNS and
  kube-router run once, for all of them.

The node's processes (containerd, kubelet, the shims, the pods) all live below the freezer cgroup
``/ftp-node-<i>``. ``stop`` freezes it and takes the node's bridge down: the processes stop where
they are and the node's pod addresses go silent, as when a machine loses power; the API server
hears nothing more from the kubelet and the node controller marks it NotReady. ``start`` brings it
back (the kubelet then finds its pods deleted or replaced and ends them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .config import Paths, write_if_changed
from .daemons import Daemons

POOL = "e2e.ftpipeline.io/pool"
POOL_VALUE = "pipelines"
CGROUP = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids", "systemd")


@dataclass(frozen=True)
class Node:
    index: int

    @property
    def name(self) -> str:
        return "ftp-node" if self.index == 0 else f"ftp-node-{self.index}"

    @property
    def bridge(self) -> str:
        return f"ftpcni{self.index}"

    @property
    def pod_cidr(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def kubelet_port(self) -> int:
        return 10250 if self.index == 0 else 10350 + self.index

    @property
    def healthz_port(self) -> int:
        return 10248 if self.index == 0 else 10360 + self.index

    @property
    def cgroup(self) -> str:
        return f"ftp-node-{self.index}"


def pool(count: int) -> list[Node]:
    """The nodes of a cluster of ``count`` nodes besides the first."""
    return [Node(i) for i in range(1, count)]


def kubelet_config(pki: Path, sock: Path, dns: str, serving: str, node: Node) -> str:
    """One kubelet's configuration: the first node's and each pool node's differ only in ports, cgroup root,
    certificate and taint."""
    extra = ""
    if node.index > 0:
        extra = (f"port: {node.kubelet_port}\nhealthzPort: {node.healthz_port}\ncgroupRoot: /{node.cgroup}\n"
                 f"registerWithTaints: [{{key: {POOL}, value: {POOL_VALUE}, effect: NoSchedule}}]\n")
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {pki / 'ca.crt'}}}
authorization: {{mode: Webhook}}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://{sock}
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [{dns}]
tlsCertFile: {pki / f'{serving}.crt'}
tlsPrivateKeyFile: {pki / f'{serving}.key'}
evictionHard: {{memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
resolvConf: /etc/resolv.conf
podPidsLimit: -1
{extra}"""


def containerd_config(root: Path, state: Path, sock: Path, cni_conf: Path, pause_image: str) -> str:
    return f"""version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_image}"
  enable_unprivileged_ports = true
  # Root may lack CAP_SYS_RESOURCE (seen in microVMs): then no process can lower its
  # OOM score, and the default -998 of a pod sandbox makes runc fail to start it.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf}"
"""


class PoolNode:
    """One pool node's files, processes and cgroup, run by ``daemons`` (the cluster's pidfiles and logs)."""

    def __init__(self, node: Node, paths: Paths, daemons: Daemons) -> None:
        self.node, self.paths, self.daemons = node, paths, daemons
        self.dir = paths.state / "nodes" / node.name
        self.sock = self.dir / "containerd" / "containerd.sock"
        self.mountns = paths.state / "nodes" / "ns" / node.name

    @property
    def containerd_root(self) -> Path:  # in the cache, as the first node's: imported images survive down/up
        return self.paths.cache / f"containerd-{self.node.name}"

    @property
    def daemon_names(self) -> tuple[str, str]:
        return (f"containerd-{self.node.name}", f"kubelet-{self.node.name}")

    def configure(self, pki: Path, dns: str, pause_image: str) -> None:
        d = self.dir
        for sub in ("containerd", "kubelet", "cni/net.d", "logs/pods", "logs/containers"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        write_if_changed(d / "containerd" / "config.toml", containerd_config(
            self.containerd_root, d / "containerd" / "state", self.sock, d / "cni" / "net.d", pause_image))
        write_if_changed(d / "kubelet-config.yaml",
                         kubelet_config(pki, self.sock, dns, f"kubelet-serving-{self.node.name}", self.node))

    # --- cgroup and mount namespace ------------------------------------------------
    def _cgroup_dirs(self) -> list[Path]:
        return [CGROUP / c / self.node.cgroup for c in V1_CONTROLLERS if (CGROUP / c).is_dir()]

    def make_cgroup(self) -> None:
        """``/ftp-node-<i>`` in every hierarchy (the kubelet checks its root exists), ``system`` below it for the
        node's own processes; cpuset's need their CPUs and memory nodes before anything joins them."""
        for directory in self._cgroup_dirs():
            for path in (directory, directory / "system"):
                path.mkdir(exist_ok=True)
                if directory.parent.name == "cpuset":
                    for knob in ("cpuset.cpus", "cpuset.mems"):
                        (path / knob).write_text((path.parent / knob).read_text())

    def make_mountns(self) -> None:
        """A persistent mount namespace (bound to a file) with the node's own pod log directories."""
        if self.mountns.exists() and self._ns_bound():
            return
        holder = self.mountns.parent
        holder.mkdir(parents=True, exist_ok=True)
        if not _mounted(holder):
            subprocess.run(["mount", "--bind", str(holder), str(holder)], check=True)
            subprocess.run(["mount", "--make-private", str(holder)], check=True)
        self.mountns.touch()
        for sub in ("pods", "containers"):
            Path("/var/log", sub).mkdir(parents=True, exist_ok=True)
        script = (f"mount --bind {self.dir / 'logs' / 'pods'} /var/log/pods && "
                  f"mount --bind {self.dir / 'logs' / 'containers'} /var/log/containers")
        subprocess.run(["unshare", f"--mount={self.mountns}", "--propagation", "private", "sh", "-c", script],
                       check=True)

    def _ns_bound(self) -> bool:
        return _mounted(self.mountns)

    def _enter(self) -> list[str]:
        """The prefix that runs a command in this node's mount namespace."""
        return ["nsenter", f"--mount={self.mountns}", "--"]

    def _join(self) -> None:  # preexec: the node's processes live below its freezer cgroup
        for directory in self._cgroup_dirs():
            (directory / "system" / "cgroup.procs").write_text(str(os.getpid()))

    # --- processes -------------------------------------------------------------
    def start_containerd(self) -> None:
        name, _ = self.daemon_names
        self.daemons._start(name, *self._enter(), "containerd", "--config", self.dir / "containerd" / "config.toml",
                            preexec=self._join)

    def fresh_runtime(self) -> None:
        """This node's containerd with an empty image store: stopped, its root (kept in the cache across
        ``down``/``up``) removed, started again. For a store an interrupted import or a node frozen mid-unpack
        left inconsistent ("parent snapshot ... does not exist"); the images are imported again."""
        name, _ = self.daemon_names
        self.daemons._stop(name)
        shutil.rmtree(self.containerd_root, ignore_errors=True)
        self.start_containerd()

    def ctr(self, *args: str) -> list[str]:
        return ["ctr", "--address", str(self.sock), "--namespace", "k8s.io", *args]

    def start_kubelet(self, kubelet: Path, node_ip: str) -> None:
        _, name = self.daemon_names
        d = self.dir
        self.daemons._start(name, *self._enter(), kubelet, "--config", d / "kubelet-config.yaml",
                            "--kubeconfig", self.paths.state / f"kubelet-{self.node.name}.kubeconfig",
                            "--root-dir", d / "kubelet", "--node-ip", node_ip, "--hostname-override", self.node.name,
                            "--node-labels", f"{POOL}={POOL_VALUE}", "--oom-score-adj=0", "--v", "1",
                            preexec=self._join)

    # --- faults ------------------------------------------------------------------
    def _freezer(self) -> Path:
        return CGROUP / "freezer" / self.node.cgroup / "freezer.state"

    def frozen(self) -> bool:
        try:
            return self._freezer().read_text().strip() != "THAWED"
        except OSError:
            return False

    def stop(self) -> None:
        """Power lost: every process of the node stops where it is, its pod addresses go silent."""
        self._freezer().write_text("FROZEN")
        subprocess.run(["ip", "link", "set", self.node.bridge, "down"], capture_output=True)

    def start(self) -> None:
        subprocess.run(["ip", "link", "set", self.node.bridge, "up"], capture_output=True)
        if self._freezer().exists():
            self._freezer().write_text("THAWED")

    # --- down ----------------------------------------------------------------------
    def teardown(self) -> None:
        """Thaw, stop the kubelet, remove every container (their shims go), stop containerd, release the mount
        namespace and the cgroups; the node's state directory goes, its containerd root (images) stays."""
        self.start()
        containerd, kubelet = self.daemon_names
        self.daemons._stop(kubelet)
        if self.daemons._alive(containerd):
            for cid in subprocess.run(self.ctr("tasks", "ls", "-q"), capture_output=True, text=True).stdout.split():
                subprocess.run(self.ctr("tasks", "kill", "-s", "SIGKILL", cid), capture_output=True)
                subprocess.run(self.ctr("tasks", "rm", "-f", cid), capture_output=True)
            for cid in subprocess.run(self.ctr("containers", "ls", "-q"), capture_output=True, text=True).stdout.split():
                subprocess.run(self.ctr("containers", "rm", cid), capture_output=True)
        self.daemons._stop(containerd)
        for directory in self._cgroup_dirs():  # whatever is left of the node (a shim, a pod's process)
            procs = [int(p) for f in directory.rglob("cgroup.procs") for p in f.read_text().split()]
            for pid in procs:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
        if self._ns_bound():
            subprocess.run(["umount", "-l", str(self.mountns)], capture_output=True)
        for directory in self._cgroup_dirs():
            for sub in sorted((p for p in directory.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                _rmdir(sub)
            _rmdir(directory)
        subprocess.run(["ip", "link", "delete", self.node.bridge], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def _mounted(path: Path) -> bool:
    """Whether something is mounted at ``path`` in this process's mount namespace."""
    return any(line.split()[4] == str(path) for line in Path("/proc/self/mountinfo").read_text().splitlines())


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
