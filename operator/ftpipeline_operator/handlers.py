"""Kopf handlers: they translate Kubernetes events into calls on the pipeline runners, and no more.

    kopf run --all-namespaces -m ftpipeline_operator.handlers

Several replicas may run: one is active, the others stand by (``peering.py``).

- create/resume/update of an FTPipeline: hand the new body to its runner (suspend, restart and
  checkpoint nonces), and no more: each attempt applies the pipeline's ConfigMap, Service and
  NetworkPolicy first (``publish``, ``owned.py``: one request each, side by side), on a
  coordinator thread, not on Kopf's handler executor;
- a daemon per FTPipeline: a coroutine that runs the coordinator on a thread of the
  operator's own pool while the pipeline runs, and holds none while it waits (``slots.py``);
- events of worker pods: to the runner of their pipeline, which reports lost
  workers to the coordinator at once (recovery does not wait for a poll);
- deletion: the daemon is stopped first (Kopf), then the pipeline's Redis
  keys and znodes are removed, then the finalizer goes;
- FTPipelineCheckpoints: a new one is handed to its pipeline's runner, which takes it at its next turn
  (``snapshots.py``); one that names no pipeline, or a pipeline that is not running, is Failed at once;
  a deleted one lets retention delete its checkpoint.

Configuration comes from the environment (the chart sets it):
FTPIPELINE_DEFAULT_REDIS_URL (and FTPIPELINE_REDIS_ADMIN_PASSWORD), FTPIPELINE_DEFAULT_ZOOKEEPER
(and FTPIPELINE_ZOOKEEPER_SUPER_PASSWORD), FTPIPELINE_DEFAULT_KAFKA (the chart's broker, for pipelines on Kafka
that name none),
FTPIPELINE_DEFAULT_S3_ENDPOINT (and FTPIPELINE_S3_ADMIN_ACCESS_KEY, FTPIPELINE_S3_ADMIN_SECRET_KEY: the chart's object store,
for pipelines with s3:// locations that name none),
FTPIPELINE_DEFAULT_IMAGE and FTPIPELINE_DEFAULT_IMAGE_PULL_POLICY (for
pipelines without spec.image: the operator's own), FTPIPELINE_MAX_RUNNING_PIPELINES (coordinator
threads), FTPIPELINE_METRICS_PORT,
FTPIPELINE_LOG_LEVEL, FTPIPELINE_PEERING and FTPIPELINE_PEERING_LIFETIME_S (``peering.py``), and the policy's
(``policy.py``). The admission webhook is a process of its own (``webhook.py``). Logs are Kopf's JSON lines
(``--log-format=json``), which name the object each line is about.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any, cast

import kopf
import redis
from kubernetes import client, config
from prometheus_client import CollectorRegistry, Gauge, Histogram, ProcessCollector, start_http_server

from ftpipeline.checkpoint.pointer import CheckpointPointer
from ftpipeline.commandlog.zkaccess import SUPER_USER
from ftpipeline.commandlog.zkclient import connect as zk_connect
from ftpipeline.commandlog.zkclient import with_identity
from ftpipeline.control import access
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.spec.checkpoint_schema import CHECKPOINT_PLURAL
from ftpipeline.spec.schema import API_GROUP, API_VERSION, PLURAL
from ftpipeline_operator import admission, netpol, peering, render
from ftpipeline_operator.objectstores import OperatorStore
from ftpipeline_operator.objectstores import revoke as revoke_object_store_user
from ftpipeline_operator.resolve import Defaults, resolve_spec
from ftpipeline_operator.runner import PipelineRunner
from ftpipeline_operator.slots import CoordinatorSlots
from ftpipeline_operator.owned import OwnedObjects, server_side_apply
from ftpipeline_operator.snapshots import owner
from ftpipeline_operator.stores import store_cas, uses_default_redis

def _default_redis_url() -> str:
    """The chart's Redis, as its admin when it requires a password (``FTPIPELINE_REDIS_ADMIN_PASSWORD``, from
    the chart's Secret): then each pipeline gets a user of its own (``stores.py``)."""
    url, password = os.environ.get("FTPIPELINE_DEFAULT_REDIS_URL", ""), os.environ.get("FTPIPELINE_REDIS_ADMIN_PASSWORD")
    return access.with_credentials(url, "", password) if url and password else url


def _default_zookeeper() -> str:
    """The chart's ZooKeeper, as its super user when the chart set one (``FTPIPELINE_ZOOKEEPER_SUPER_PASSWORD``):
    then each pipeline gets a digest identity of its own (``stores.py``)."""
    hosts, password = os.environ.get("FTPIPELINE_DEFAULT_ZOOKEEPER", ""), os.environ.get("FTPIPELINE_ZOOKEEPER_SUPER_PASSWORD")
    return with_identity(hosts, SUPER_USER, password) if hosts and password else hosts


def _default_object_store() -> OperatorStore | None:
    """The chart's S3 store (``FTPIPELINE_DEFAULT_S3_ENDPOINT``) and its root keys (``FTPIPELINE_S3_ADMIN_ACCESS_KEY``,
    ``FTPIPELINE_S3_ADMIN_SECRET_KEY``, from the chart's Secret): each pipeline gets a user of its own there."""
    endpoint = os.environ.get("FTPIPELINE_DEFAULT_S3_ENDPOINT", "")
    access_key, secret_key = os.environ.get("FTPIPELINE_S3_ADMIN_ACCESS_KEY"), os.environ.get("FTPIPELINE_S3_ADMIN_SECRET_KEY")
    return OperatorStore(endpoint, access_key, secret_key) if endpoint and access_key and secret_key else None


DEFAULTS = Defaults(_default_redis_url(),
                    _default_zookeeper(),
                    os.environ.get("FTPIPELINE_DEFAULT_IMAGE", ""),
                    os.environ.get("FTPIPELINE_DEFAULT_IMAGE_PULL_POLICY", ""),
                    admission.POLICY,
                    redis_users=bool(os.environ.get("FTPIPELINE_REDIS_ADMIN_PASSWORD")),
                    zookeeper_users=bool(os.environ.get("FTPIPELINE_ZOOKEEPER_SUPER_PASSWORD")),
                    kafka=os.environ.get("FTPIPELINE_DEFAULT_KAFKA", ""),
                    object_store=_default_object_store())
OPERATOR_PODS = netpol.OperatorPods.from_env()
REGISTRY = CollectorRegistry()
SLOTS = CoordinatorSlots(int(os.environ.get("FTPIPELINE_MAX_RUNNING_PIPELINES", "100")))
DAEMON_EXIT_WAIT_S = 10.0  # how long a deletion waits for the pipeline's daemon to end by itself
DAEMON_CANCEL_S = 60.0     # then Kopf gives up on it (a thread cannot be cancelled) and the finalizer goes
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 30)
HANDLER_SECONDS = Histogram("ftpipeline_operator_handler_seconds", "How long the operator's handlers take",
                            ["handler"], registry=REGISTRY,
                            buckets=SECONDS_BUCKETS)
PUBLISH_SECONDS = Histogram("ftpipeline_operator_publish_seconds",
                            "How long writing a pipeline's ConfigMap, Service and NetworkPolicy takes (each attempt)",
                            registry=REGISTRY, buckets=SECONDS_BUCKETS)
PIPELINES = Gauge("ftpipeline_operator_pipelines", "FTPipelines this operator knows", registry=REGISTRY)
RUNNING = Gauge("ftpipeline_operator_running_coordinators", "Coordinators running on the operator's threads",
                registry=REGISTRY)
RUNNING.set_function(lambda: SLOTS.running)
PIPELINES.set_function(lambda: len(_runners))
ProcessCollector(registry=REGISTRY)  # the operator's memory and CPU (process_resident_memory_bytes)
_runners: dict[tuple[str, str], PipelineRunner] = {}
_lock = threading.Lock()
_api: dict[str, Any] = {}


def _core() -> client.CoreV1Api:
    return _api["core"]  # type: ignore[no-any-return]


def _runner(body: Mapping[str, Any]) -> PipelineRunner:
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    with _lock:
        runner = _runners.get(key)
        if runner is None:
            def post(kind: str, reason: str, message: str) -> None:
                kopf.event(cast(kopf.Body, body), type=kind, reason=reason, message=message)

            runner = _runners[key] = PipelineRunner(key, _core(), _api["custom"], DEFAULTS, REGISTRY, post,
                                                    publish=publish, post_object_event=_post_object_event)
        return runner


def _post_object_event(obj: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
    kopf.event(cast(kopf.Body, obj), type=kind, reason=reason, message=message)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    logging.getLogger("ftpipeline").setLevel(os.environ.get("FTPIPELINE_LOG_LEVEL", "INFO"))
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # not a line per pod event handled
    settings.persistence.finalizer = f"{API_GROUP}/cleanup"
    settings.watching.server_timeout = 120
    settings.execution.max_workers = 16  # handlers only: coordinators run on SLOTS' threads
    # A deleted pipeline's daemon stops within a second or two (it checks ``stopped`` between steps), but Kopf
    # only notices a thread that did not end "instantly" when cancellation_timeout has passed: every deletion
    # took 60 s. Wait this long for the thread instead; one that takes longer still gets the 60 s.
    settings.background.instant_exit_timeout = DAEMON_EXIT_WAIT_S
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    _api["core"] = client.CoreV1Api()
    _api["custom"] = client.CustomObjectsApi()
    _api["owned"] = OwnedObjects(server_side_apply(_api["core"]))
    peering.configure(settings, _api["custom"])
    port = os.environ.get("FTPIPELINE_METRICS_PORT")
    if port:
        start_http_server(int(port), registry=REGISTRY)


@kopf.on.create(API_GROUP, API_VERSION, PLURAL)
@kopf.on.resume(API_GROUP, API_VERSION, PLURAL)
@kopf.on.update(API_GROUP, API_VERSION, PLURAL)
@HANDLER_SECONDS.labels("reconcile").time()
def reconcile(body: kopf.Body, **_: Any) -> None:
    """Hands the new body to its runner and no more: what it implies is done by the pipeline's next attempt,
    on a coordinator thread (its objects too: ``publish``), so a burst of creations never waits here on the
    API server while pod events and deletions queue behind it."""
    doc = dict(body)
    _runner(doc).update_body(doc)


@PUBLISH_SECONDS.time()
def publish(doc: Mapping[str, Any]) -> None:
    """The objects a pipeline owns, as its document now says (``owned.py``: each sent only when changed)."""
    objs = [render.config_map(doc, store_cas()), render.service(doc), render.disruption_budget(doc)]
    if OPERATOR_PODS is not None:  # the chart's networkPolicy.enabled
        objs.append(netpol.worker_policy(doc, OPERATOR_PODS))
    _api["owned"].apply(objs)


@kopf.daemon(API_GROUP, API_VERSION, PLURAL, cancellation_backoff=DAEMON_EXIT_WAIT_S,
             cancellation_timeout=DAEMON_CANCEL_S)
async def coordinate(stopped: kopf.DaemonStopped, body: kopf.Body, **_: Any) -> None:
    runner = _runner(dict(body))
    if not runner.body:
        runner.update_body(dict(body))
    await SLOTS.serve(runner, stopped)


@kopf.on.event("", "v1", "pods", labels={"app.kubernetes.io/managed-by": "ftpipeline-operator",
                                         "app.kubernetes.io/component": "worker"})
@HANDLER_SECONDS.labels("pod_event").time()
def pod_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    labels = body.get("metadata", {}).get("labels", {})
    key = (body.get("metadata", {}).get("namespace", ""), labels.get(render.PIPELINE_LABEL, ""))
    with _lock:
        runner = _runners.get(key)
    if runner is not None:
        runner.pod_event(str(event.get("type") or ""), dict(body))


@kopf.on.delete(API_GROUP, API_VERSION, PLURAL)
@HANDLER_SECONDS.labels("cleanup").time()
def cleanup(body: kopf.Body, **_: Any) -> None:
    """The pipeline's Redis keys and znodes go with it (pods, Service and ConfigMap are owned: the GC takes them)."""
    doc = dict(body)
    key = (doc["metadata"]["namespace"], doc["metadata"]["name"])
    with _lock:
        _runners.pop(key, None)
    _api["owned"].forget(*key)
    try:
        spec = resolve_spec(doc, _core(), DEFAULTS)
        if spec.redis_url:
            r = redis.Redis.from_url(spec.redis_url, socket_connect_timeout=5)  # no retrying: deletion must end
            LineageTables(r, spec.store_key).clear()  # every key of the pipeline: lineage and the step log share it
            if DEFAULTS.redis_users and uses_default_redis(doc):
                access.revoke(r, spec.store_key)
            r.close()
        if spec.zookeeper:
            zk = zk_connect(spec.zookeeper, start_timeout_s=15)
            CheckpointPointer(zk, spec.store_key).clear()
            zk.stop()
            zk.close()
    except Exception as exc:
        # never hold a deletion (or its namespace's) hostage to a store that is gone with it
        kopf.warn(cast(kopf.Body, doc), reason="CleanupIncomplete",
                  message=f"the pipeline's Redis keys or znodes may remain: {exc}")
    if DEFAULTS.object_store is not None:  # whatever its spec says now: deleting a user that is not there is no-op
        try:
            revoke_object_store_user(DEFAULTS.object_store, *key)
        except Exception as exc:
            kopf.warn(cast(kopf.Body, doc), reason="CleanupIncomplete",
                      message=f"the pipeline's user on the object store may remain: {exc}")


@kopf.on.create(API_GROUP, API_VERSION, CHECKPOINT_PLURAL)
@kopf.on.resume(API_GROUP, API_VERSION, CHECKPOINT_PLURAL)
@HANDLER_SECONDS.labels("checkpoint").time()
def checkpoint_requested(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """A checkpoint asked for by name goes to its pipeline's runner (``snapshots.py``); Failed at once when
    there is no such pipeline or it is not running. Records of committed ones pin nothing."""
    spec, status, namespace = body.spec, body.status, str(body.metadata.namespace)
    if spec.get("alreadyExists") or status.get("state") == "Failed":
        return
    pipeline = str(spec["pipeline"])
    with _lock:
        runner = _runners.get((namespace, pipeline))
    if runner is None or not runner.body:
        try:
            _api["custom"].get_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, pipeline)
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
            _checkpoint_failed(body, patch, f"FTPipeline {namespace}/{pipeline} does not exist (spec.pipeline)")
            return
        raise kopf.TemporaryError(f"FTPipeline {pipeline} is not known to this operator yet", delay=2)
    if status.get("state") != "Committed" and runner.resting:
        _checkpoint_failed(body, patch, f"FTPipeline {pipeline} is not running (succeeded, failed or suspended): "
                                        f"no checkpoint can be taken")
        return
    uid = runner.body["metadata"].get("uid")
    if uid and not body.get("metadata", {}).get("ownerReferences"):  # it goes with its pipeline
        patch.metadata["ownerReferences"] = [owner(pipeline, str(uid))]
    runner.snapshots.accept(dict(body))  # writes Pending itself, before the coordinator can move it on


def _checkpoint_failed(body: kopf.Body, patch: kopf.Patch, message: str) -> None:
    patch.status.update(state="Failed", message=message)
    kopf.warn(body, reason="CheckpointFailed", message=message)


@kopf.on.event(API_GROUP, API_VERSION, CHECKPOINT_PLURAL)
def checkpoint_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    """A deleted FTPipelineCheckpoint: retention may delete its checkpoint now (kept while the object existed).
    A watch event, not a deletion handler: that one would need a finalizer on every checkpoint object."""
    if event.get("type") != "DELETED":
        return
    with _lock:
        runner = _runners.get((str(body.metadata.namespace), str(body.spec.get("pipeline"))))
    if runner is not None:
        runner.snapshots.forget(str(body.metadata.name))
