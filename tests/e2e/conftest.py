"""e2e tests: a real Kubernetes cluster, reached only through KUBECONFIG.

Bring one up with ``python -m tests.e2e.cluster up`` (built here from package
registries) or ``... up --provider kind``, then ``eval "$(python -m
tests.e2e.cluster env)"``. Any other cluster works too, given the project
image: FTPIPELINE_E2E_IMAGE (default localhost/ftpipeline:e2e) must be
present on its nodes (tests use imagePullPolicy: Never).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("FTPIPELINE_E2E_IMAGE", "localhost/ftpipeline:e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def kube() -> Iterator[object]:
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("no cluster: set KUBECONFIG (python -m tests.e2e.cluster up, then ... env)")
    from kubernetes import client, config

    config.load_kube_config()
    api = client.ApiClient()
    yield api
    api.close()


@pytest.fixture
def namespace(kube: object) -> Iterator[str]:
    from kubernetes import client

    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(kube)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # the service account controller creates "default" asynchronously; pods need it
    for _ in range(100):
        if core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
            break
        import time

        time.sleep(0.1)
    yield name
    core.delete_namespace(name, grace_period_seconds=0)


@pytest.fixture
def crd(kube: Any) -> str:
    """The FTPipeline CRD from crds/, created or replaced, and established."""
    import time

    import yaml
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ext = client.ApiextensionsV1Api(kube)
    doc = yaml.safe_load((ROOT / "crds" / "ftpipeline.yaml").read_text())
    name = doc["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(doc)
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = ext.read_custom_resource_definition(name)
        doc["metadata"]["resourceVersion"] = current.metadata.resource_version
        ext.replace_custom_resource_definition(name, doc)
    for _ in range(100):
        conditions = ext.read_custom_resource_definition(name).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return name
        time.sleep(0.1)
    raise AssertionError("CRD not established")
