"""The servers a pipeline depends on, as commands: the chart runs them from the project image.

``ftpipeline serve-redis``, ``serve-zookeeper``, ``serve-kafka`` and ``serve-s3`` each
become the server (``exec``), so in a container the server is the process
that signals and the kubelet see. They are the same commands the embedded
servers of ``ftpipeline run`` and the tests use (``embedded/``), with the
chart's settings as flags: credentials, TLS, persistence.
``ftpipeline fetch-jars`` downloads the pinned jars (``embedded/jars.py``) ahead of time
(the image build does; a run otherwise fetches them on first use).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from ftpipeline.commandlog.zkaccess import super_digest
from ftpipeline.embedded import jars, kafka
from ftpipeline.embedded.redis import prepare_acl_file, redis_command
from ftpipeline.embedded.s3 import s3_command
from ftpipeline.embedded.zookeeper import Ensemble, member_id, zookeeper_command
from ftpipeline.worker import jvmarchive


def cmd_serve(args: argparse.Namespace) -> int:
    """Become the server (exec)."""
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.command == "serve-redis":
        aclfile = None
        if args.admin_password_file is not None:
            aclfile = prepare_acl_file(args.dir, args.admin_password_file.read_text().strip())
        command = redis_command(args.dir, port=args.port, bind=args.bind, appendonly=args.appendonly,
                                appendfsync=args.appendfsync, aclfile=aclfile, tls_dir=args.tls_dir,
                                unixsocket=args.unixsocket)
    elif args.command == "serve-zookeeper":
        digest = None
        if args.super_password_file is not None:
            digest = super_digest(args.super_password_file.read_text().strip())
        # its configuration (and with TLS the key store) in a directory of its own, never on the data volume
        conf = Path(tempfile.mkdtemp(prefix="ftpipeline-zookeeper-"))
        ensemble = None
        if args.servers:
            try:
                my_id = member_id(socket.gethostname()) if args.id == "auto" else int(args.id)
                ensemble = Ensemble(tuple(m.strip() for m in args.servers.split(",") if m.strip()), my_id)
            except ValueError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
        command = zookeeper_command(args.dir, args.port, digest, tls_dir=args.tls_dir, probe_port=args.probe_port,
                                    conf_dir=conf, ensemble=ensemble)
    elif args.command == "serve-s3":
        for sub in ("data", "iam"):  # buckets under data/ (each a directory), the users in iam/
            (args.dir / sub).mkdir(exist_ok=True)
        for bucket in args.bucket or []:
            (args.dir / "data" / bucket).mkdir(exist_ok=True)
        command = s3_command(args.dir / "data", args.port, args.bind, args.tls_dir, args.dir / "iam")
        os.environ["ROOT_ACCESS_KEY"] = args.access_key_file.read_text().strip()
        os.environ["ROOT_SECRET_KEY"] = args.secret_key_file.read_text().strip()
    else:
        conf = Path(tempfile.mkdtemp(prefix="ftpipeline-kafka-"))
        command = kafka.prepare(conf, args.dir, args.port, args.controller_port, advertise=args.advertise,
                                bind=args.bind, jars=args.jars)
    sys.stdout.flush()
    os.execv(command[0], command)


def cmd_jvm_archive(args: argparse.Namespace) -> int:
    console = Console()
    path = jvmarchive.archive_path()
    if path is None:
        console.print(f"no archive: {jvmarchive.ENV}=off, or no java found (JAVA_HOME, PATH)")
        return 1
    if path.is_file():
        console.print(f"the Spark JVM's class archive is {path}")
        return 0
    return 0 if jvmarchive.prepare(console.print, console.status) else 1


def cmd_fetch_jars(args: argparse.Namespace) -> int:
    console = Console()
    unknown = [n for n in args.names if n not in jars.CLOSURES]
    if unknown:
        console.print(f"[red]error:[/red] no pinned jars named {', '.join(unknown)} (there are: {', '.join(jars.CLOSURES)})")
        return 2
    for closure in [jars.CLOSURES[n] for n in (args.names or jars.CLOSURES)]:
        locked = closure.locked()
        directory = args.dir or closure.jars_dir()
        wanted = jars.missing(directory, locked)
        if not wanted:
            console.print(f"{closure.title} {closure.version}: all {len(locked)} jars are in {directory}")
            continue
        with Progress(TextColumn("fetching {task.fields[title]} {task.fields[version]}"), BarColumn(),
                      MofNCompleteColumn(), TextColumn("{task.fields[mb]:.1f} MB"), console=console) as progress:
            task = progress.add_task("fetch", total=len(wanted), title=closure.title, version=closure.version, mb=0.0)
            fetched = 0

            def done(jar: jars.Jar, size: int) -> None:
                nonlocal fetched
                fetched += size
                progress.update(task, advance=1, mb=fetched / 1e6)

            try:
                jars.fetch(directory, locked, done)
            except (OSError, ValueError) as exc:
                console.print(f"[red]error:[/red] {exc}")
                return 1
        console.print(f"{closure.title} {closure.version}: {len(wanted)} jars ({fetched / 1e6:.1f} MB) into {directory}")
    return 0


def add_server_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, port, what in (("serve-redis", 6379, "a Redis server for lineage"),
                             ("serve-zookeeper", 2181, "a standalone ZooKeeper server (from PySpark's jars)"),
                             ("serve-kafka", 9092, "a single-node Kafka broker (KRaft, from the pinned jars)"),
                             ("serve-s3", 7070, "an S3-compatible object store (the Versity S3 Gateway over --dir)")):
        serve = sub.add_parser(name, help=f"run {what}: the chart's in-cluster default, from the same image")
        serve.add_argument("--port", type=int, default=port, help=f"port to listen on (default {port})")
        if name == "serve-redis":  # ZooKeeper's standalone server always listens on every interface
            serve.add_argument("--bind", default="0.0.0.0", help="address to listen on (default: every interface)")
            serve.add_argument("--appendonly", action="store_true",
                               help="keep an append-only file in --dir (fsync every second): a restart keeps the data")
            serve.add_argument("--appendfsync", choices=["everysec", "always"], default="everysec",
                               help="with --appendonly: fsync every second (a machine's crash may lose the last "
                                    "second of writes) or after every write (nothing lost, slower)")
            serve.add_argument("--admin-password-file", type=Path, metavar="FILE",
                               help="require authentication: the admin (default user) has the password in FILE; "
                                    "pipelines' own users are kept in --dir/users.acl across restarts")
            serve.add_argument("--unixsocket", type=Path, metavar="PATH",
                               help="also listen on this Unix socket (owner only), e.g. for a readiness probe")
        elif name == "serve-zookeeper":
            serve.add_argument("--super-password-file", type=Path, metavar="FILE",
                               help="the super user (the operator: it passes every ACL) has the password in FILE; "
                                    "each pipeline's znodes are then its own (digest ACLs)")
            serve.add_argument("--servers", metavar="HOST,HOST,HOST",
                               help="be a member of an ensemble: every member's host (or host:quorum-port:"
                                    "election-port; default ports 2888 and 3888), in id order from 1")
            serve.add_argument("--id", default="auto", metavar="N|auto",
                               help="with --servers: this member's id (1, 2, ...); auto: the host name's "
                                    "StatefulSet ordinal plus one (default)")
            serve.add_argument("--probe-port", type=int, default=2182,
                               help="with --tls-dir: a plaintext port on the loopback interface alone, for a "
                                    "readiness probe inside the pod (default 2182)")
        elif name == "serve-s3":
            serve.add_argument("--bind", default="0.0.0.0", help="address to listen on (default: every interface)")
            serve.add_argument("--access-key-file", type=Path, metavar="FILE", required=True,
                               help="the root user's access key id is in FILE")
            serve.add_argument("--secret-key-file", type=Path, metavar="FILE", required=True,
                               help="the root user's secret access key is in FILE")
            serve.add_argument("--bucket", action="append", metavar="NAME",
                               help="make this bucket (the root user's) if it is not there (repeatable); buckets "
                                    "are kept in --dir/data, the users the root user adds in --dir/iam")
        else:
            serve.add_argument("--bind", default="0.0.0.0", help="address to listen on (default: every interface)")
            serve.add_argument("--advertise", default="127.0.0.1",
                               help="host clients are told to connect to (on Kubernetes: the Service's name)")
            serve.add_argument("--controller-port", type=int, default=9093,
                               help="the KRaft controller's port, on the loopback interface (default 9093)")
            serve.add_argument("--jars", type=Path, metavar="DIR", help="the broker's jars (default: the cache)")
        serve.add_argument("--dir", type=Path, default=Path("/tmp") / name, help="working/data directory")
        if name != "serve-kafka":
            serve.add_argument("--tls-dir", type=Path, metavar="DIR",
                               help="serve clients over TLS alone, with DIR/tls.crt and DIR/tls.key (and "
                                    "DIR/ca.crt, the files of a kubernetes.io/tls Secret)")
        serve.set_defaults(func=cmd_serve)
    fetch = sub.add_parser("fetch-jars", help="download the pinned jars (Kafka's broker, Delta Lake) from Maven Central",
                           description="Download pinned jars (each closure locked, each jar checked by its SHA-256) "
                                       "into --dir, default the cache every run uses (FTPIPELINE_<NAME>_JARS or "
                                       "~/.cache/ftpipeline/<name>-<version>): kafka, the broker a run starts when "
                                       "a pipeline names no cluster; delta, delta-spark for Spark code that reads "
                                       "Delta itself (spark.conf naming Delta's extension). Runs fetch what they lack themselves; this is for offline use.")
    fetch.add_argument("names", nargs="*", metavar="NAME",
                       help=f"which: {', '.join(jars.CLOSURES)} (default: all)")
    fetch.add_argument("--dir", type=Path, metavar="DIR", help="where to keep them (with one NAME)")
    fetch.set_defaults(func=cmd_fetch_jars)
    archive = sub.add_parser("jvm-archive", help="make the Spark JVM's class archive now (runs make it when missing)",
                             description="Make the class-data-sharing archive the workers' Spark JVMs start from "
                                         "(~/.cache/ftpipeline/jvm, or FTPIPELINE_JVM_ARCHIVE; 'off' turns it off): "
                                         "about half of a JVM's start. ftpipeline run makes it before its first "
                                         "workers; this is for ahead of time (an image, a machine's set-up).")
    archive.set_defaults(func=cmd_jvm_archive)
