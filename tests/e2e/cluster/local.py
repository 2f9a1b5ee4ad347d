"""The local provider: every component a process on this machine; one node, or more with ``--nodes``.

``up`` order: packages and artifacts (``build.py``) -> node address on a dummy
interface, IP forwarding -> certificates and kubeconfigs -> etcd ->
kube-apiserver (wait for /readyz) -> controller-manager, scheduler, CoreDNS
(the cluster's DNS, serving on the node address) -> the default StorageClass
``standard`` and local-path-provisioner (wait for /ready; ``storage.py``) ->
containerd (images imported) -> kubelet, kube-proxy, kube-router (NetworkPolicy
enforcement) -> wait for the node to be Ready -> the pool nodes, if any (``nodes.py``). Each daemon runs in its own session with its log and pid file in
the state directory, so it outlives this command and ``down`` can find it.

``down`` stops the provisioner and the kubelet first (so they create
nothing), removes every container and pod sandbox containerd has (which stops
their shims), stops the daemons, unmounts everything below the state and
containerd directories, deletes the network namespaces, the bridge and the
dummy interface, and the iptables chains of the CNI plugins and kube-proxy.
etcd's data and the volumes go too: every ``up`` is a fresh cluster. Built
binaries and images stay in the cache.
"""

from __future__ import annotations

import functools
import os
import signal
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from . import build, pki, podnet, storage
from .build import phase, run
from .daemons import Daemons
from .nodes import Node, PoolNode, containerd_config, kubelet_config, pool
from .config import (COREDNS, ETCD, HELM, KUBE_ROUTER, LOCAL_PATH_PROVISIONER, PAUSE_IMAGE, PROJECT_IMAGE, Network,
                     Paths, write_if_changed)

DAEMONS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "coredns", "local-path-provisioner",
           "containerd", "kubelet", "kube-proxy", "kube-router")


class LocalCluster(Daemons):
    def __init__(self, paths: Paths | None = None, net: Network | None = None, nodes: int | None = None) -> None:
        self.paths = paths or Paths.from_env()
        self.net = net or Network()
        self.state = self.paths.state
        self.sock = self.state / "containerd" / "containerd.sock"
        count = self.state / "nodes.count"  # what the last up made: down, status and node faults follow it
        if nodes is None:
            nodes = int(count.read_text()) if count.exists() else 1
        self.pool = [PoolNode(node, self.paths, self) for node in pool(nodes)]

    @property
    def node_count(self) -> int:
        return 1 + len(self.pool)

    def pool_node(self, name: str) -> PoolNode:
        for node in self.pool:
            if node.node.name == name:
                return node
        raise SystemExit(f"no pool node {name!r}: this cluster has {[n.node.name for n in self.pool]}")

    # --- configuration -----------------------------------------------------
    def _network(self) -> None:
        n = self.net
        if subprocess.run(["ip", "link", "show", n.node_if], capture_output=True).returncode != 0:
            run("ip", "link", "add", n.node_if, "type", "bridge")  # a portless bridge: this kernel may lack "dummy"
        run("ip", "addr", "replace", f"{n.node_ip}/32", "dev", n.node_if)
        run("ip", "link", "set", n.node_if, "up")
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
        Path("/proc/sys/net/bridge/bridge-nf-call-iptables").write_text("1")
        run("sh", "-c", podnet.service_guard(n.bridge, n.service_cidr))
        several = bool(self.pool)
        if several:
            run("sh", "-c", podnet.masquerade_rule(n.cluster_cidr))
        cni = self.state / "cni" / "net.d"
        cni.mkdir(parents=True, exist_ok=True)
        write_if_changed(cni / "10-ftpipeline.conflist",
                         podnet.conflist(n.bridge, n.pod_cidr, str(self.state / "cni" / "ipam"), masquerade=not several))
        for node in self.pool:
            run("sh", "-c", podnet.service_guard(node.node.bridge, n.service_cidr))
            (node.dir / "cni" / "net.d").mkdir(parents=True, exist_ok=True)
            write_if_changed(node.dir / "cni" / "net.d" / "10-ftpipeline.conflist", podnet.conflist(
                node.node.bridge, node.node.pod_cidr, str(node.dir / "cni" / "ipam"), masquerade=False))

    def _configs(self) -> None:
        p, n, s = self.paths, self.net, self.state
        pki.make_all(p.pki, n.node, n.node_ip, n.service_ip, [node.node.name for node in self.pool])
        server = f"https://{n.node_ip}:{n.apiserver_port}"
        for user, cert in (("admin", "admin"), ("controller-manager", "controller-manager"),
                           ("scheduler", "scheduler"), ("kubelet", "kubelet"), ("kube-proxy", "kube-proxy"),
                           *((f"kubelet-{node.node.name}", f"kubelet-{node.node.name}") for node in self.pool)):
            pki.kubeconfig(s / f"{user}.kubeconfig", p.pki, server, user, cert)
        for node in self.pool:
            node.configure(p.pki, n.node_ip, PAUSE_IMAGE)
        (s / "containerd").mkdir(parents=True, exist_ok=True)
        write_if_changed(s / "containerd" / "config.toml", containerd_config(
            p.containerd_root, s / "containerd" / "state", self.sock, s / "cni" / "net.d", PAUSE_IMAGE))
        (s / "kubelet").mkdir(parents=True, exist_ok=True)
        write_if_changed(s / "kubelet-config.yaml",
                         kubelet_config(p.pki, self.sock, n.node_ip, "kubelet-serving", Node(0)))
        # cluster DNS: Services and pods of cluster.local from the API; nothing else is resolved
        write_if_changed(s / "Corefile", f"""cluster.local:53 in-addr.arpa:53 {{
    bind {n.node_ip}
    errors
    kubernetes cluster.local in-addr.arpa {{
        kubeconfig {p.kubeconfig}
        pods insecure
    }}
    cache 5
}}
""")
        write_if_changed(s / "kube-proxy-config.yaml", f"""apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {s / 'kube-proxy.kubeconfig'}}}
mode: iptables
clusterCIDR: {n.cluster_cidr}
hostnameOverride: {n.node}
conntrack: {{maxPerCore: 0}}
oomScoreAdj: 0
""")

    # --- readiness ---------------------------------------------------------
    def _readyz(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.paths.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.paths.pki / "admin.crt"), str(self.paths.pki / "admin.key"))
        url = f"https://{self.net.node_ip}:{self.net.apiserver_port}/readyz"
        with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
            return bool(resp.status == 200)

    def _provisioner_ready(self) -> bool:
        url = f"http://127.0.0.1:{self.net.local_path_health_port}/ready"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return bool(resp.status == 200)

    def kubectl(self, *args: str) -> str:
        return run(self.paths.k8s_bin / "kubectl", "--kubeconfig", self.paths.kubeconfig, *args, quiet=True)

    def _node_ready(self) -> bool:
        return self._node_is_ready(self.net.node)

    def _ctr(self, *args: str) -> str:
        return run("ctr", "--address", self.sock, "--namespace", "k8s.io", *args, quiet=True)

    def _import_images(self, archives: list[tuple[Path, str]], ctr: list[str] | None = None, node: str = "",
                       again: bool = True) -> None:
        """``archives`` (archive, tag) into a node's containerd (the first node's by default), unless it has
        them: each node keeps a mark per archive. A pool node whose import fails gets an empty image store
        and imports everything once more (its store is a cache: nothing else is lost)."""
        ctr = ctr or ["ctr", "--address", str(self.sock), "--namespace", "k8s.io"]
        present = set(run(*ctr, "images", "ls", "-q", quiet=True).split())
        for archive, tag in archives:
            mark = archive.with_name(archive.stem + (f".{node}" if node else "") + ".imported")
            if tag in present and mark.exists():
                continue
            with phase(f"import {archive.name} into {node or 'the first node'}'s containerd"):
                try:
                    run(*ctr, "images", "import", str(archive), quiet=True)
                except RuntimeError as exc:
                    if not node or not again:
                        raise
                    print(f"--- {node}: the import failed ({str(exc).strip().splitlines()[-1][:200]}); "
                          f"its image store is made anew", flush=True)
                    pool_node = self.pool_node(node)
                    pool_node.fresh_runtime()
                    self._wait(pool_node.daemon_names[0], lambda: subprocess.run(
                        pool_node.ctr("version"), capture_output=True).returncode == 0, 60, pool_node.daemon_names[0])
                    for other in archives:
                        other[0].with_name(other[0].stem + f".{node}.imported").unlink(missing_ok=True)
                    self._import_images(archives, ctr, node, again=False)
                    return
                mark.write_text(tag)

    def _node_is_ready(self, name: str) -> bool:
        out = self.kubectl("get", "node", name, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}")
        return out.strip() == "True"

    def _start_pool_runtimes(self) -> None:
        """Each pool node's cgroup, mount namespace and containerd (its kubelet comes after the images)."""
        for node in self.pool:
            node.make_cgroup()
            node.make_mountns()
            node.start_containerd()
            containerd = node.daemon_names[0]
            self._wait(containerd, lambda n=node: subprocess.run(n.ctr("version"), capture_output=True)
                       .returncode == 0, 60, containerd)

    def _import_everywhere(self) -> None:
        """The images into every node's containerd at once (each import mostly waits on the disk)."""
        archives = [(build.ensure_pause(self.paths), PAUSE_IMAGE), (build.ensure_project_image(self.paths), PROJECT_IMAGE)]
        targets: list[tuple[list[str] | None, str]] = [(None, ""), *((n.ctr(), n.node.name) for n in self.pool)]
        build.together(*(functools.partial(self._import_images, archives, ctr, node) for ctr, node in targets))

    def _up_pool(self) -> None:
        """The pool nodes' kubelets, once the first node is Ready; then each Ready."""
        for node in self.pool:
            node.start_kubelet(self.paths.k8s_bin / "kubelet", self.net.node_ip)
        for node in self.pool:
            self._wait(f"node {node.node.name} Ready", lambda n=node: self._node_is_ready(n.node.name), 180,
                       node.daemon_names[1])

    def stop_node(self, name: str) -> None:
        self.pool_node(name).stop()

    def start_node(self, name: str) -> None:
        self.pool_node(name).start()

    # --- commands ----------------------------------------------------------
    def up(self) -> None:
        p, n, s = self.paths, self.net, self.state
        total = time.monotonic()
        build.ensure_apt()
        # the project image (mostly apt, pip and the disk) is built while the Go builds keep the cores busy
        with phase("binaries (Go modules) and the project image"):
            build.together(lambda: build.ensure_go_binaries(p), lambda: build.ensure_project_image(p))
        with phase("pause image"):
            build.ensure_pause(p)  # from the Kubernetes module source, which the Go builds fetch
        with phase("network, certificates, configuration"):
            s.mkdir(parents=True, exist_ok=True)
            self._network()
            self._configs()
        k8s = p.k8s_bin
        with phase("control plane"):
            self._start("etcd", p.bin("etcd", ETCD) / "etcd", "--data-dir", s / "etcd", "--name", n.node,
                        "--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
                        "--listen-peer-urls", "http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level", "warn")
            self._start("kube-apiserver", k8s / "kube-apiserver",
                        "--etcd-servers", "http://127.0.0.1:2379",
                        "--advertise-address", n.node_ip, "--bind-address", "0.0.0.0", "--secure-port", str(n.apiserver_port),
                        "--tls-cert-file", p.pki / "apiserver.crt", "--tls-private-key-file", p.pki / "apiserver.key",
                        "--client-ca-file", p.pki / "ca.crt",
                        "--kubelet-client-certificate", p.pki / "apiserver-kubelet-client.crt",
                        "--kubelet-client-key", p.pki / "apiserver-kubelet-client.key",
                        "--kubelet-certificate-authority", p.pki / "ca.crt",
                        "--service-account-key-file", p.pki / "sa.pub",
                        "--service-account-signing-key-file", p.pki / "sa.key",
                        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                        "--service-cluster-ip-range", n.service_cidr,
                        "--kubelet-preferred-address-types", "InternalIP,Hostname",
                        "--authorization-mode", "Node,RBAC", "--allow-privileged=true",
                        "--enable-admission-plugins", "NodeRestriction", "--profiling=false")
            self._wait("kube-apiserver /readyz", self._readyz, 120, "kube-apiserver")
            self._start("kube-controller-manager", k8s / "kube-controller-manager",
                        "--kubeconfig", s / "controller-manager.kubeconfig",
                        "--authentication-kubeconfig", s / "controller-manager.kubeconfig",
                        "--authorization-kubeconfig", s / "controller-manager.kubeconfig",
                        "--service-account-private-key-file", p.pki / "sa.key", "--root-ca-file", p.pki / "ca.crt",
                        "--cluster-signing-cert-file", p.pki / "ca.crt", "--cluster-signing-key-file", p.pki / "ca.key",
                        "--use-service-account-credentials=true", "--leader-elect=false",
                        "--bind-address", "127.0.0.1", "--profiling=false")
            self._start("coredns", p.bin("coredns", COREDNS) / "coredns", "-conf", s / "Corefile")
            self._start("kube-scheduler", k8s / "kube-scheduler", "--kubeconfig", s / "scheduler.kubeconfig",
                        "--authentication-kubeconfig", s / "scheduler.kubeconfig",
                        "--authorization-kubeconfig", s / "scheduler.kubeconfig",
                        "--leader-elect=false", "--bind-address", "127.0.0.1", "--profiling=false")
        with phase("default StorageClass (local-path-provisioner)"):
            p.volumes.mkdir(parents=True, exist_ok=True)
            objects = s / "local-path-storage.json"
            objects.write_text(storage.manifest(p.volumes, PROJECT_IMAGE))
            self.kubectl("apply", "-f", str(objects))
            binary = p.bin("local-path-provisioner", LOCAL_PATH_PROVISIONER) / "local-path-provisioner"
            self._start("local-path-provisioner", *storage.command(binary, p.kubeconfig, n.local_path_health_port))
            self._wait("local-path-provisioner /ready", self._provisioner_ready, 60, "local-path-provisioner")
        with phase("node (containerd, kubelet, kube-proxy)"):
            self._start("containerd", "containerd", "--config", s / "containerd" / "config.toml")
            self._wait("containerd", lambda: self._ctr("version") != "", 60, "containerd")
            # from here on the pool nodes have daemons: a down after an up that fails later must find them
            (s / "nodes.count").write_text(str(self.node_count))
            self._start_pool_runtimes()
            self._import_everywhere()
            self._start("kubelet", k8s / "kubelet", "--config", s / "kubelet-config.yaml",
                        "--kubeconfig", s / "kubelet.kubeconfig", "--root-dir", s / "kubelet",
                        "--node-ip", n.node_ip, "--hostname-override", n.node, "--oom-score-adj=0", "--v", "1")
            self._start("kube-proxy", k8s / "kube-proxy", "--config", s / "kube-proxy-config.yaml")
            self._wait(f"node {n.node} Ready", self._node_ready, 180, "kubelet")
            # NetworkPolicy: kube-router's firewall alone (no routing, no service proxy), on this node's pods; it
            # looks its node up at start, so it starts once the node is registered
            self._start("kube-router", p.bin("kube-router", KUBE_ROUTER) / "kube-router", "--kubeconfig", p.kubeconfig,
                        "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
                        "--hostname-override", n.node, "--health-port", str(n.kube_router_health_port), "--v", "1")
            self._wait("kube-router /healthz", self._kube_router_healthy, 60, "kube-router")
        if self.pool:
            self._up_pool()
        (s / "nodes.count").write_text(str(self.node_count))
        with phase("node (service account)"):
            self._wait("service account default/default", lambda: bool(self.kubectl(
                "get", "serviceaccount", "default", "-n", "default", "-o", "name").strip()), 60, "kube-controller-manager")
        print(f"--- cluster up in {time.monotonic() - total:.1f}s; {self.env()}", flush=True)

    def _kube_router_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.net.kube_router_health_port}/healthz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def env(self) -> str:
        """The shell's variables for the tests: the kubeconfig, kubectl and helm on PATH, and with a node pool the
        command that stops and starts one of its nodes (``FTPIPELINE_E2E_NODE_FAULT stop|start <node>``)."""
        out = f"export KUBECONFIG={self.paths.kubeconfig} PATH={self.paths.k8s_bin}:{self.paths.bin('helm', HELM)}:$PATH"
        if self.pool:
            out += f" FTPIPELINE_E2E_NODE_FAULT='{sys.executable} -m tests.e2e.cluster node'"
        return out

    def status(self) -> str:
        lines = [f"{name}: {'running (pid %d)' % pid if (pid := self._alive(name)) else 'stopped'}"
                 for name in self._daemons()]
        lines += [f"{node.node.name}: stopped (frozen)" for node in self.pool if node.frozen()]
        if self._alive("kube-apiserver"):
            try:
                lines.append(self.kubectl("get", "nodes", "-o", "wide").strip())
            except RuntimeError as exc:
                lines.append(str(exc))
        return "\n".join(lines)

    def down(self) -> None:
        s, n = self.state, self.net
        with phase("down"):
            self._stop("local-path-provisioner")
            for node in self.pool:
                node.teardown()
            self._stop("kubelet")
            self._stop("kube-proxy")
            self._stop("kube-router")
            if self._alive("containerd"):
                for kind in ("tasks", "containers"):
                    ids = self._ctr(kind, "ls", "-q").split()
                    for cid in ids:
                        if kind == "tasks":
                            subprocess.run(["ctr", "--address", str(self.sock), "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", cid],
                                           capture_output=True)
                            time.sleep(0.2)
                            subprocess.run(["ctr", "--address", str(self.sock), "-n", "k8s.io", "tasks", "rm", "-f", cid],
                                           capture_output=True)
                        else:
                            subprocess.run(["ctr", "--address", str(self.sock), "-n", "k8s.io", "containers", "rm", cid],
                                           capture_output=True)
            for name in ("containerd", "coredns", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
                self._stop(name)
            # shims outlive containerd by design; ours are the ones talking to our socket
            for line in subprocess.run(["pgrep", "-af", "containerd-shim"], capture_output=True, text=True).stdout.splitlines():
                pid, _, cmdline = line.partition(" ")
                if str(self.sock) in cmdline or str(s) in cmdline:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
            roots = (str(s), str(self.paths.containerd_root), "/run/netns/cni-", "/var/run/netns/cni-")
            mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
            for mnt in sorted((m for m in mounts if m.startswith(roots)), key=len, reverse=True):
                subprocess.run(["umount", "-l", mnt], capture_output=True)
            for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n"):
                if ns.startswith("cni-"):
                    subprocess.run(["ip", "netns", "delete", ns.split()[0]], capture_output=True)
            for link in (n.bridge, n.node_if):
                subprocess.run(["ip", "link", "delete", link], capture_output=True)
            while subprocess.run(["ip", "rule", "delete", "priority", podnet.SERVICE_ROUTES],
                                 capture_output=True).returncode == 0:
                pass  # one rule per node's bridge
            subprocess.run(["ip", "route", "flush", "table", podnet.SERVICE_ROUTES], capture_output=True)
            self._flush_iptables()
            for name in subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True).stdout.split():
                if name.startswith(("KUBE-", "kube-router")):  # kube-router's, referenced by no rule any more
                    subprocess.run(["ipset", "destroy", name], capture_output=True)
            for sub in ("etcd", "kubelet", "containerd/state", "cni/ipam", "run", "nodes"):
                shutil.rmtree(s / sub, ignore_errors=True)
            shutil.rmtree(self.paths.volumes, ignore_errors=True)
            (s / "nodes.count").unlink(missing_ok=True)

    def _flush_iptables(self) -> None:
        saved = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
        if not any(tok in saved for tok in ("KUBE-", "CNI-")):
            return
        kept = [line for line in saved.splitlines() if "KUBE-" not in line and "CNI-" not in line]
        subprocess.run(["iptables-restore"], input="\n".join(kept) + "\n", text=True, capture_output=True)

    def leftovers(self) -> list[str]:
        """Processes, mounts and volumes of this cluster that still exist (``down`` must leave none)."""
        out = []
        for name in self._daemons():
            if self._alive(name):
                out.append(f"process {name}")
        pattern = "containerd-shim|kubelet|kube-apiserver|etcd|local-path-provisioner"
        for line in subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout.splitlines():
            if str(self.state) in line or str(self.sock) in line or str(self.paths.cache) in line:
                out.append(f"process {line[:120]}")
        roots = (str(self.state), str(self.paths.containerd_root))
        out += [f"mount {line.split()[1]}" for line in Path("/proc/mounts").read_text().splitlines()
                if line.split()[1].startswith(roots)]
        if self.paths.volumes.exists():
            out.append(f"directory {self.paths.volumes}")
        out += [f"cgroup {c}" for c in Path("/sys/fs/cgroup/freezer").glob("ftp-node-*")]
        return out

    def _daemons(self) -> list[str]:
        return [*DAEMONS, *(name for node in self.pool for name in node.daemon_names)]
