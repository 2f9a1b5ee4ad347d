"""A pipeline's own credentials to the shared Redis and ZooKeeper, issued by the operator, kept in a Secret.

The chart's Redis requires a password and its ZooKeeper knows a super user;
only the operator holds either (its default endpoints carry them). A
pipeline that names no server of its own never sees them: before each run
the operator makes sure the pipeline has its own Redis user
(``ftpipeline/control/access.py``: its keys only, no administrative
command) and its own ZooKeeper identity (``ftpipeline/commandlog/zkaccess.py``:
its znodes only), and hands both to the coordinator and, through the Secret
``<name>-store``, to the worker pods' sidecars. The spark container, which
runs user code, gets none of them.

The Secret is created on the pipeline's first run and read on later ones,
so a restarted run, a restarted operator and a restarted Redis (whose ACL
file kept the user, or which gets it again here) all agree on one password.
It is owned by the FTPipeline and deleted with it; the user is revoked by
the deletion handler.

A pipeline with ``spec.redis`` or ``spec.zookeeper`` brings its own endpoint
and credentials for it; the operator issues nothing for that server.

When the stores serve TLS, the operator's URLs name their CA files
(``rediss://...?ssl_ca_certs=``, ``hosts?ca=``) under
``render.STORE_CA_DIR``, where the chart mounts each CA (never a server's
key); the pipeline's ConfigMap carries them to its sidecars, mounted at the
same path, so the same URL works in both (``store_cas``).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import redis
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ftpipeline.commandlog import zkaccess
from ftpipeline.commandlog.zkclient import connect as zk_connect
from ftpipeline.commandlog.zkclient import with_identity
from ftpipeline.control import access
from ftpipeline.control.redisclient import OutageRetry
from ftpipeline_operator import render

log = logging.getLogger("ftpipeline.operator.stores")
ADMIN_TIMEOUT_S = 10.0
ZOOKEEPER_START_S = 30.0


def uses_default_redis(body: Mapping[str, Any]) -> bool:
    return not body["spec"].get("redis")


def uses_default_zookeeper(body: Mapping[str, Any]) -> bool:
    return not body["spec"].get("zookeeper")


def store_cas(directory: Path = Path(render.STORE_CA_DIR)) -> dict[str, str]:
    """The CA (PEM) of each store the operator reaches over TLS, read now: a renewed CA reaches the pipelines
    with their next reconcile and run."""
    found = {}
    for store in render.STORES:
        path = directory / store / "ca.crt"
        if path.is_file():
            found[store] = path.read_text()
    return found


def put_secret(core: client.CoreV1Api, secret: dict[str, Any]) -> None:
    """Create the Secret, or replace the one of that name (the operator's own: a pipeline's credentials)."""
    name, namespace = secret["metadata"]["name"], secret["metadata"]["namespace"]
    try:
        core.create_namespaced_secret(namespace, cast(client.V1Secret, secret))
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_secret(name, namespace, cast(client.V1Secret, secret))


def read_data(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, str] | None:
    try:
        data = core.read_namespaced_secret(name, namespace).data or {}
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def issue(core: client.CoreV1Api, body: Mapping[str, Any], store_key: str, redis_admin: str | None,
          zookeeper_admin: str | None, between: Callable[[], None] | None = None) -> tuple[str | None, str | None]:
    """The pipeline's own Redis URL and ZooKeeper connect string, granted now on the servers the admin
    endpoints name (None: not asked for, or issued nothing). A Redis outage is waited out, as every other
    Redis call of a run does (``between`` may raise to stop waiting)."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    secret_name = render.store_secret_name(name)
    data = read_data(core, namespace, secret_name) or {}
    wanted = dict(data)
    redis_url = zookeeper = None
    if redis_admin:
        password = data.get("redis-password") or access.new_password()
        admin = redis.Redis.from_url(redis_admin, socket_connect_timeout=ADMIN_TIMEOUT_S,
                                     socket_timeout=ADMIN_TIMEOUT_S, retry=OutageRetry(between=between))
        try:
            user = access.grant(admin, store_key, password)
        finally:
            admin.close()
        redis_url = access.with_credentials(redis_admin, user, password)
        wanted.update({"redis-password": password, render.STORE_REDIS_KEY: redis_url})
    if zookeeper_admin:
        password = data.get("zookeeper-password") or access.new_password()
        zk = zk_connect(zookeeper_admin, start_timeout_s=ZOOKEEPER_START_S)
        try:
            user = zkaccess.grant(zk, store_key, password)
        finally:
            zk.stop()
            zk.close()
        zookeeper = with_identity(zookeeper_admin, user, password)
        wanted.update({"zookeeper-password": password, render.STORE_ZOOKEEPER_KEY: zookeeper})
    if wanted != data:
        put_secret(core, render.store_secret(body, wanted))
    log.info("pipeline store users granted", extra={"pipeline": f"{namespace}/{name}", "redis": bool(redis_url),
                                                     "zookeeper": bool(zookeeper)})
    return redis_url, zookeeper


def revoke_redis(admin_url: str, store_key: str) -> None:
    admin = redis.Redis.from_url(admin_url, socket_connect_timeout=5, socket_timeout=5)
    try:
        access.revoke(admin, store_key)
    finally:
        admin.close()
