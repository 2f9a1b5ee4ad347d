"""A worker sidecar's process: its Arrow Flight server, its background loop, its ZooKeeper peer.

``python -m ftpipeline.worker.server`` is what ``ftpipeline run`` and the
worker pods start. The logic of the calls lives in ``sidecar.py`` (and the
checkpoint storage actions in ``checkpoint_files.py``); this module only
serves them: Flight actions are the control API (``do_action``: an action
name and a JSON body), Flight ``do_get`` streams a buffered object to a peer
or to the local Spark process.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pyarrow.flight as flight

from ftpipeline.commandlog.peer import Peer
from ftpipeline.commandlog.zkclient import connect as zk_connect
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.obs.logging import setup_json_logging
from ftpipeline.obs.metrics import WorkerMetrics
from ftpipeline.worker.background import Background
from ftpipeline.worker.sidecar import Sidecar

log = logging.getLogger("ftpipeline.sidecar")


class _FlightServer(flight.FlightServerBase):  # type: ignore[misc]
    def __init__(self, location: str, sidecar: Sidecar) -> None:
        super().__init__(location)
        self.sidecar = sidecar

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.RecordBatchStream:
        name = ticket.ticket.decode()
        table = self.sidecar.buffer.read(name)
        if table is None:
            raise flight.FlightServerError(f"object {name} is not held by {self.sidecar.worker}")
        return flight.RecordBatchStream(table)

    def do_action(self, context: Any, action: flight.Action) -> Any:
        raw = action.body.to_pybytes() if action.body is not None else b""
        body = json.loads(raw or b"{}")
        try:
            result = self.sidecar.handle(action.type, body)
        except Exception:
            log.exception("action failed", extra={"action": action.type})
            raise
        yield flight.Result(json.dumps(result).encode())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="ftpipeline runtime sidecar")
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--pipeline", required=True, help="the pipeline's identity: the key of its Redis keys and znodes")
    parser.add_argument("--metrics-label", default=None, help="the pipeline label of /metrics (default: --pipeline)")
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--dir", required=True, type=Path, help="buffer directory shared with the Spark process")
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--advertise", default=None, help="address peers use to reach this worker (default: --bind)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port")
    parser.add_argument("--zookeeper", default=None, help="ZooKeeper of the command log: join its ring")
    parser.add_argument("--heartbeat-timeout-ms", type=int, default=6000, help="ZooKeeper session timeout")
    args = parser.parse_args(argv)
    setup_json_logging()
    sidecar = Sidecar(WorkerId(args.worker_id), args.pipeline, args.redis_url, args.dir)
    if args.metrics_port is not None:
        sidecar.metrics = WorkerMetrics(args.metrics_label or args.pipeline, args.worker_id, sidecar.buffer.held_bytes, sidecar.buffer.held)
        sidecar.metrics.serve(args.metrics_port, args.bind)
    server = _FlightServer(f"grpc://{args.bind}:{args.port}", sidecar)
    sidecar.address = f"{args.advertise or args.bind}:{server.port}"
    sidecar.store.register(sidecar.worker, {"address": sidecar.address, "pid": os.getpid()})
    (args.dir / "sidecar.addr.tmp").write_text(sidecar.address)
    os.replace(args.dir / "sidecar.addr.tmp", args.dir / "sidecar.addr")
    background = Background(sidecar)
    threading.Thread(target=background.run, name="background", daemon=True).start()
    threading.Thread(target=background.listen, name="listen", daemon=True).start()
    if args.zookeeper:
        zk = zk_connect(args.zookeeper, timeout_s=args.heartbeat_timeout_ms / 1000)
        Peer(zk, args.pipeline, sidecar.worker, on_fenced=sidecar.fence, still_member=sidecar.still_member).start()
    log.info("listening", extra={"worker": sidecar.worker, "address": sidecar.address})
    threading.Thread(target=lambda: (sidecar.stopping.wait(), server.shutdown()), daemon=True).start()
    server.serve()


if __name__ == "__main__":
    main()
