# kind's node base image, made on a machine that reaches no container registry and no release download.
#
# The build context is kind's own images/base directory, taken from the kind Go module at the version the
# provider runs (its entrypoint, systemd units, containerd and kubelet configuration), plus a "local"
# folder with what is built here: containerd (the version kind pins) and crictl from their Go modules, and
# the registry mirror's CA. The steps are kind's, with two differences: the base is Debian bookworm
# bootstrapped locally instead of a registry's debian image, and runc and the CNI plugins are Debian's
# packages instead of source builds that clone from GitHub.
ARG BASE
FROM ${BASE}

COPY files/usr/local/bin/ /usr/local/bin/
RUN chmod 0755 /usr/local/bin/* \
 && DEBIAN_FRONTEND=noninteractive clean-install \
      systemd \
      conntrack iptables nftables iproute2 ethtool util-linux mount kmod \
      libseccomp2 pigz \
      e2fsprogs \
      bash ca-certificates curl jq procps \
      runc containernetworking-plugins \
 && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
 && rm -f /lib/systemd/system/multi-user.target.wants/* \
 && rm -f /etc/systemd/system/*.wants/* \
 && rm -f /lib/systemd/system/local-fs.target.wants/* \
 && rm -f /lib/systemd/system/sockets.target.wants/*udev* \
 && rm -f /lib/systemd/system/sockets.target.wants/*initctl* \
 && rm -f /lib/systemd/system/basic.target.wants/* \
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
 && ln -sf /usr/lib/systemd/systemd /sbin/init

# kind's files after the packages, so that its containerd configuration is the one in place. One setting
# changes: containerd never gives a container an OOM score below its own (kind does that for rootless
# nodes). A pod sandbox asks for -998, and lowering a score needs CAP_SYS_RESOURCE, which the node
# lacks where this machine's root does (see capfilter.py): every sandbox would fail to start.
COPY files/kind/ /kind/
COPY files/etc/ /etc/
COPY local/ /
RUN chmod 0755 /kind /kind/bin /kind/bin/* /usr/local/bin/* \
 && mkdir -p /opt/cni && ln -sfn /usr/lib/cni /opt/cni/bin \
 && ctr oci spec \
      | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
      | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
 && sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml \
 && update-ca-certificates \
 && systemctl enable kubelet.service \
 && systemctl enable containerd.service \
 && systemctl enable undo-mount-hacks.service \
 && systemctl mask systemd-binfmt.service \
 && mkdir -p /etc/kubernetes/manifests

ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
