"""The Kopf operator for FTPipeline resources (Kubernetes side of ftpipeline).

Handlers here only translate Kubernetes events into calls on the runtime's
coordinator (``ftpipeline.coordinator``) and render manifests; coordination
and recovery live in the runtime, shared with ``ftpipeline run``. The CRD it
serves is rendered from ``ftpipeline.spec.schema`` into ``crds/``.
"""
