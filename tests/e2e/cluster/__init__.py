"""A real single-node Kubernetes for the e2e tests, built from package registries.

``python -m tests.e2e.cluster up|down|status|env [--provider local|kind]``

- ``local`` (default): etcd and the Kubernetes binaries built from Go modules,
  Debian's containerd/runc/CNI plugins, a locally built pause image, and the
  project image built from its own Dockerfile with buildah on a Debian base
  made with debootstrap. Caches live outside the repository
  (``$FTPIPELINE_E2E_CACHE``, default ``~/.cache/ftpipeline-e2e``); runtime
  state in ``$FTPIPELINE_E2E_STATE`` (default ``/var/lib/ftpipeline-e2e``).
- ``kind``: where Docker and kind exist, a kind cluster with the image loaded.

The e2e tests only read ``KUBECONFIG``: they do not care which provider made
the cluster, or whether it is this one at all.
"""
