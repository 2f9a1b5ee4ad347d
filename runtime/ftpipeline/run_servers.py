"""The servers ``ftpipeline run`` starts for a pipeline that names none of its own: a Kafka broker, an S3 store.

Redis and ZooKeeper are the run's own always (``coordinator/session.py``);
these two only when the pipeline needs them and no address is configured:

- **Kafka** (``kafka/local.py``): the pipeline reads or writes a topic and
  ``spec.kafka.bootstrapServers`` is empty. A fresh run starts it empty.
- **S3** (``embedded/s3.py``): a location is an ``s3://`` URI and neither an
  endpoint nor keys are configured (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``:
  ``objectstore/config.py``; keys alone mean AWS itself). Its data
  is kept across runs, as a local directory's would be (what a fresh run
  does with output already there is the sinks' ``existingOutput``), the
  buckets the pipeline names are made, and its endpoint and keys are put in
  this process's environment, which the workers and ``--verify`` inherit.
  It starts before any worker process does.

Both stop when the run ends (with ``--verify``, after the oracle read them).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from ftpipeline.embedded.kafka import EmbeddedKafka
from ftpipeline.embedded.s3 import EmbeddedS3
from ftpipeline.kafka.local import needs_private, produce_file, topics_of, with_private
from ftpipeline.objectstore.base import split_uri
from ftpipeline.objectstore.config import S3Config
from ftpipeline.spec.model import PipelineSpec


@dataclass
class RunServers:
    kafka: EmbeddedKafka | None = None
    s3: EmbeddedS3 | None = None

    def stop(self) -> None:
        for server in (self.kafka, self.s3):
            if server is not None:
                server.stop()
        self.kafka = self.s3 = None


def private_s3(spec: PipelineSpec, directory: Path, console: Console | None = None) -> EmbeddedS3 | None:
    """The run directory's S3 server when the pipeline writes to ``s3://`` and no endpoint is configured; the one a
    killed run left is kept (a resumed run's workers know its address)."""
    uris = spec.object_store_uris
    configured = S3Config.from_env()
    if not uris or configured.endpoint is not None or configured.access_key is not None:
        return None
    server = EmbeddedS3(directory)
    if not server.adopt():
        if console is not None:
            with console.status("starting a private S3 server"):
                server.start()
        else:
            server.start()
    for uri in uris:
        server.create_bucket(split_uri(uri)[0])
    for stale in ("AWS_SESSION_TOKEN", "AWS_CA_BUNDLE", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(stale, None)
    os.environ.update(server.config.to_env())
    if console is not None:
        console.print(f"object store: a private S3 server at {server.endpoint}, its data in {server.data}")
    return server


def start_run_servers(console: Console, spec: PipelineSpec, args: argparse.Namespace, run_dir: Path,
                      resuming: bool) -> tuple[PipelineSpec, RunServers]:
    """Kafka (with ``--produce``'s records loaded before a fresh run) and S3, as the pipeline needs them."""
    servers = RunServers()
    try:
        if needs_private(spec):
            with console.status("starting a private Kafka broker"):
                spec, servers.kafka = with_private(spec, run_dir / "kafka", fresh=not resuming)
            assert servers.kafka is not None
            console.print(f"Kafka: a private broker at {servers.kafka.bootstrap}, topics {', '.join(topics_of(spec))}")
        for topic, path in ([] if resuming else args.produce or []):
            count = produce_file(spec.kafka_bootstrap, topic, Path(path))
            console.print(f"produced {count:,} records of {path} to topic {topic}")
        servers.s3 = private_s3(spec, run_dir / "s3", console)
    except BaseException:
        servers.stop()
        raise
    return spec, servers


def reopen_run_servers(spec: PipelineSpec, run_dir: Path) -> tuple[PipelineSpec, RunServers]:
    """The servers of a run that ended, as it left them (``ftpipeline verify``)."""
    spec, kafka = with_private(spec, run_dir / "kafka", fresh=False)
    servers = RunServers(kafka)
    try:
        servers.s3 = private_s3(spec, run_dir / "s3")
    except BaseException:
        servers.stop()
        raise
    return spec, servers
