"""A worker sidecar's process: its two Arrow Flight servers, its background loop, its ZooKeeper peer.

``python -m ftpipeline.worker.server`` is what ``ftpipeline run`` and the
worker pods start. The logic of the calls lives in ``sidecar.py`` (and the
checkpoint storage actions in ``checkpoint_files.py``); this module only
serves them, on two listeners that answer different callers:

- the network listener (``--bind``/``--port``): the coordinator's actions
  and peers' ``do_get`` of buffered objects. With ``--tls-dir`` it speaks
  mutual TLS under the pipeline's CA (``tls.py``): a caller without the
  pipeline's certificate is refused in the handshake, before any action;
- the local listener: a Unix socket in the work directory (shared with the
  Spark process, in a pod an ``emptyDir``), for the Spark process's actions
  alone. The Spark process runs user code, so it gets no certificate and no
  address of the control plane: its sidecar is all it can reach.

Each listener dispatches only its own list of actions (``COORDINATOR_ACTIONS``,
``SPARK_ACTIONS``); anything else is refused as unknown, and a ``do_get``
ticket must be an object name exactly as the runtime makes them
(``ObjectName.checked``), so it can never name a path.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any

import pyarrow.flight as flight

from ftpipeline.barrier.delta import trust_store_ca
from ftpipeline.commandlog.peer import Peer
from ftpipeline.commandlog.zkclient import connect as zk_connect
from ftpipeline.lineage.naming import ObjectName, WorkerId
from ftpipeline.obs.errors import one_line
from ftpipeline.obs.logging import setup_json_logging
from ftpipeline.obs.metrics import WorkerMetrics
from ftpipeline.worker.background import Background
from ftpipeline.worker.sidecar import Sidecar
from ftpipeline.worker.tls import load as load_credentials

log = logging.getLogger("ftpipeline.sidecar")


# What each listener may be asked. Every ``_do_`` action of Sidecar, CheckpointFiles and Outputs is in exactly one
# (tests/unit/worker/test_server_actions.py): a new action is callable only once it is listed here.
COORDINATOR_ACTIONS = frozenset({
    "state", "create", "adopt", "open", "step", "wake", "checkpoint", "release", "prepare_outputs", "barrier",
    "shutdown", "stats", "checkpoints", "checkpoint_manifest", "publish_checkpoint", "reset_checkpoints",
    "discard_checkpoints", "handover",
})
SPARK_ACTIONS = frozenset({
    "hello", "next_task", "may_write", "opened", "task_done", "task_failed", "snapshot_done", "snapshot_failed",
})
SOCKET = "sidecar.sock"


class _FlightServer(flight.FlightServerBase):  # type: ignore[misc]
    def __init__(self, location: str, sidecar: Sidecar, actions: frozenset[str], objects: bool,
                 **options: Any) -> None:
        super().__init__(location, **options)
        self.sidecar = sidecar
        self.actions = actions
        self.objects = objects  # whether do_get serves buffered objects here

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.RecordBatchStream:
        if not self.objects:
            raise flight.FlightServerError("objects are not served on this listener")
        raw = ticket.ticket.decode(errors="replace")
        try:
            name = ObjectName.checked(raw).key()
        except ValueError as exc:
            log.warning("refused object request", extra={"error": str(exc)})
            raise flight.FlightServerError(str(exc)) from None
        table = self.sidecar.buffer.read(name)
        if table is None:
            raise flight.FlightServerError(f"object {name} is not held by {self.sidecar.worker}")
        return flight.RecordBatchStream(table)

    def do_action(self, context: Any, action: flight.Action) -> Any:
        if action.type not in self.actions:
            log.warning("refused action", extra={"action": action.type[:80]})
            raise flight.FlightServerError(f"unknown action {action.type[:80]!r}")
        raw = action.body.to_pybytes() if action.body is not None else b""
        body = json.loads(raw or b"{}")
        try:
            result = self.sidecar.handle(action.type, body)
        except Exception as exc:  # the caller gets one line; the traceback stays in this process's log
            log.exception("action failed", extra={"action": action.type})
            raise flight.FlightServerError(f"{action.type}: {one_line(exc)}") from None
        yield flight.Result(json.dumps(result).encode())

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        return [(a, "") for a in sorted(self.actions)]


def local_socket(work_dir: Path) -> Path:
    """Where the Spark process finds its sidecar: the work directory's socket, or, when that path is
    longer than a Unix socket's 107 bytes allow, one under the shared /tmp named after it."""
    path = work_dir.resolve() / SOCKET
    if len(str(path).encode()) <= 100:
        return path
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"ftpipeline-{digest}.sock"


def main(argv: list[str] | None = None) -> None:
    trust_store_ca()  # a private object store's CA, for delta-rs (barrier/delta.py), before any thread
    parser = argparse.ArgumentParser(description="ftpipeline runtime sidecar")
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--pipeline", required=True, help="the pipeline's identity: the key of its Redis keys and znodes")
    parser.add_argument("--metrics-label", default=None, help="the pipeline label of /metrics (default: --pipeline)")
    # endpoints (and the credentials they carry) come from the environment by default, which keeps them out of
    # the process list: FTPIPELINE_REDIS_URL, FTPIPELINE_ZOOKEEPER
    parser.add_argument("--redis-url", default=os.environ.get("FTPIPELINE_REDIS_URL") or None,
                        help="Redis of the lineage (default: $FTPIPELINE_REDIS_URL)")
    parser.add_argument("--dir", required=True, type=Path, help="buffer directory shared with the Spark process")
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--advertise", default=None, help="address peers use to reach this worker (default: --bind)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port")
    parser.add_argument("--zookeeper", default=os.environ.get("FTPIPELINE_ZOOKEEPER") or None,
                        help="ZooKeeper of the command log: join its ring (default: $FTPIPELINE_ZOOKEEPER)")
    parser.add_argument("--heartbeat-timeout-ms", type=int, default=6000, help="ZooKeeper session timeout")
    parser.add_argument("--tls-dir", type=Path, default=None,
                        help="the pipeline's credentials (ca.crt, tls.crt, tls.key): mutual TLS on the network listener")
    args = parser.parse_args(argv)
    if not args.redis_url:
        parser.error("no Redis: pass --redis-url or set FTPIPELINE_REDIS_URL")
    setup_json_logging()
    credentials = load_credentials(args.tls_dir) if args.tls_dir else None
    sidecar = Sidecar(WorkerId(args.worker_id), args.pipeline, args.redis_url, args.dir, credentials)
    if args.metrics_port is not None:
        sidecar.metrics = WorkerMetrics(args.metrics_label or args.pipeline, args.worker_id, sidecar.buffer.held_bytes, sidecar.buffer.held)
        sidecar.metrics.serve(args.metrics_port, args.bind)
    options = credentials.server_options() if credentials else {}
    scheme = "grpc+tls" if credentials else "grpc"
    server = _FlightServer(f"{scheme}://{args.bind}:{args.port}", sidecar, COORDINATOR_ACTIONS, True, **options)
    sidecar.address = f"{args.advertise or args.bind}:{server.port}"
    socket = local_socket(args.dir)
    socket.unlink(missing_ok=True)
    local = _FlightServer(f"grpc+unix://{socket}", sidecar, SPARK_ACTIONS, False)
    sidecar.store.register(sidecar.worker, {"address": sidecar.address, "pid": os.getpid()})
    (args.dir / "sidecar.addr.tmp").write_text(f"grpc+unix://{socket}")  # the Spark process's way in
    os.replace(args.dir / "sidecar.addr.tmp", args.dir / "sidecar.addr")
    background = Background(sidecar)
    threading.Thread(target=background.run, name="background", daemon=True).start()
    threading.Thread(target=background.listen, name="listen", daemon=True).start()
    if args.zookeeper:
        zk = zk_connect(args.zookeeper, timeout_s=args.heartbeat_timeout_ms / 1000)
        Peer(zk, args.pipeline, sidecar.worker, on_fenced=sidecar.fence, still_member=sidecar.still_member).start()
    log.info("listening", extra={"worker": sidecar.worker, "address": sidecar.address})
    # Both listeners serve from their construction on. Their serve() is not called: it would shut them down
    # on a signal, and SIGTERM (an eviction, a drain) asks for a handover instead (worker/leaving.py)
    signal.signal(signal.SIGTERM, lambda signum, frame: sidecar.leaving.request())
    while not sidecar.stopping.wait(0.2):
        pass
    local.shutdown()
    server.shutdown()


if __name__ == "__main__":
    main()
