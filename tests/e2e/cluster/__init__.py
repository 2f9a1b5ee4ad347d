"""A real Kubernetes for the e2e tests, built from package registries.

``python -m tests.e2e.cluster up|down|status|env [--provider local|kind] [--nodes N]``

- ``local`` (default): etcd and the Kubernetes binaries built from Go modules,
  Debian's containerd/runc/CNI plugins, a locally built pause image, and the
  project image built from its own Dockerfile with buildah on a Debian base
  made with debootstrap. Caches live outside the repository
  (``$FTPIPELINE_E2E_CACHE``, default ``~/.cache/ftpipeline-e2e``); runtime
  state in ``$FTPIPELINE_E2E_STATE`` (default ``/var/lib/ftpipeline-e2e``).
  ``--nodes N`` adds a pool of N-1 nodes that a test can stop (``nodes.py``).
- ``kind``: a kind cluster (kind from its Go module) of the same Kubernetes: kind's base image
  rebuilt on the bootstrapped Debian, its node image made with ``kind build node-image``
  from the binaries built here, the images it fetches by name served by a local registry
  mirror, the Docker engine from Debian's ``docker.io`` where none runs (``kind.py``).

The e2e tests only read ``KUBECONFIG``: they do not care which provider made
the cluster, or whether it is this one at all.
"""
