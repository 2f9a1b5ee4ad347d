"""``ftpipeline``: run, validate and verify pipelines on this machine.

``ftpipeline run PIPELINE.yaml`` runs the same FTPipeline document that the
operator runs on Kubernetes, with workers as local processes and embedded
defaults: with no Redis configured it starts a private one. The spec is
validated completely before anything starts, so a bad file costs no JVM.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from kazoo.client import KazooClient

from ftpipeline.barrier import barrier_of
from ftpipeline.barrier.delta import trust_store_ca
from ftpipeline.barrier.existing import prepare_outputs
from ftpipeline.cluster.local import LocalCluster
from ftpipeline.commandlog.zkclient import connect as zk_connect
from ftpipeline.control.history import history_store
from ftpipeline.coordinator.coordinator import Coordinator, PipelineFailed
from ftpipeline.coordinator.errors import TaskFailed
from ftpipeline.coordinator.faults import FaultPlan
from ftpipeline.coordinator.members import worker_name
from ftpipeline.coordinator.session import Session, open_session
from ftpipeline.dataflow.deadletter import default_dead_letter_root
from ftpipeline.dataflow.graph import Graph
from ftpipeline.kafka.topics import topic_problems
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.obs.errors import one_line, redacted
from ftpipeline.obs.logging import setup_json_logging
from ftpipeline.obs.metrics import RunMetrics
from ftpipeline.progress import LEDGER, FaultLedger, LocalObserver, ProgressObserver
from ftpipeline.report import Fanout, LiveServer, Timeline, serve, write_report
from ftpipeline.run_servers import reopen_run_servers, start_run_servers
from ftpipeline.servers import add_server_parsers
from ftpipeline.spec.cores import master_for_process
from ftpipeline.spec.load import SpecError, load_pipeline
from ftpipeline.spec.model import PipelineSpec, StageSpec
from ftpipeline.summary import print_summary, result_json
from ftpipeline.worker import jvmarchive
from ftpipeline.worker.session import ORACLE_JAVA_OPTIONS, build_session


# command-line option -> the PipelineSpec field it overrides
_OVERRIDES = (("workers", "workers"), ("steps", "max_steps"), ("redis_url", "redis_url"),
              ("zookeeper", "zookeeper"), ("checkpoint_every", "checkpoint_steps"), ("strategy", "recovery_strategy"),
              ("kafka", "kafka_bootstrap"))


def _override(spec: PipelineSpec, args: argparse.Namespace) -> PipelineSpec:
    changes: dict[str, Any] = {field: getattr(args, option) for option, field in _OVERRIDES
                               if getattr(args, option) is not None}
    if getattr(args, "no_chaining", False):
        changes["chaining"] = False
    if getattr(args, "no_plan_reuse", False):
        changes["reuse_plans"] = False
    if args.mode is not None:
        changes["mode"] = args.mode
        changes["window"] = (args.window or 3) if args.mode == "pipelined" else 1
    elif args.window is not None and spec.mode == "pipelined":
        changes["window"] = args.window
    return dataclasses.replace(spec, **changes) if changes else spec


def _overwriting(spec: PipelineSpec) -> PipelineSpec:
    """``--overwrite``: every sink's ``existingOutput`` is ``overwrite``."""
    def overwriting(stage: StageSpec) -> StageSpec:
        changes = {field: dataclasses.replace(sink, existing="overwrite") for field in ("sink", "kafka_sink", "delta_sink")
                   if (sink := getattr(stage, field)) is not None}
        return dataclasses.replace(stage, **changes)

    stages = tuple(overwriting(s) for s in spec.stages)
    return dataclasses.replace(spec, stages=stages)


def _console() -> Console:
    """The terminal's width on a terminal; elsewhere (a log file, a pipe, CI) lines as long as they are, so
    no path or message is cut or wrapped. Log lines carry no code location."""
    if sys.stdout.isatty():
        return Console(log_path=False)
    return Console(log_path=False, width=100_000, soft_wrap=True)


def run_identity(name: str, pipeline_file: Path) -> str:
    """A local pipeline's identity: its name and a digest of its file's absolute path. ``--resume`` and
    ``--from-checkpoint`` (the same file, from any run directory) find its state again; a pipeline of
    the same name in another file, sharing a Redis or a ZooKeeper, has its own."""
    import hashlib

    return f"{name}.{hashlib.sha256(str(pipeline_file.resolve()).encode()).hexdigest()[:10]}"


def _prepare_outputs(spec: PipelineSpec, console: Console) -> bool:
    """Each sink's ``existingOutput`` applied before any worker starts (``barrier/existing.py``)."""
    problems = prepare_outputs(spec, default_dead_letter_root(spec))
    for problem in problems:
        console.print(f"[red]error:[/red] {problem}; or pass --overwrite to replace it")
    return not problems


def _load(console: Console, path: Path, check_entry_point: bool = True) -> PipelineSpec | None:
    """The validated spec, or None after printing every problem with its field path."""
    try:
        return load_pipeline(path, check_entry_point)
    except SpecError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return None


def _session_expirer(zk: KazooClient, hosts: str, console: Console) -> Callable[[], None]:
    """Fault injection: once, just before a checkpoint commit, make ZooKeeper expire our session."""
    done = False

    def expire() -> None:
        nonlocal done
        if done:
            return
        done = True
        session_id, password = zk.client_id
        other = zk_connect(hosts, start_timeout_s=10, client_id=(session_id, password))
        other.stop()
        other.close()
        console.log("[red]fault injection: ZooKeeper session expired during a checkpoint commit[/red]")

    return expire


def cmd_run(args: argparse.Namespace) -> int:
    console = _console()
    loaded = _load(console, args.pipeline)
    if loaded is None:
        return 2
    spec = _override(loaded, args)
    resuming = args.resume or args.from_checkpoint is not None
    per_step = len(Graph.physical(spec).channels())  # one task per channel of the chained graph
    if args.kill_at_step is not None and not args.kill_during_checkpoint and args.kill_after_tasks > per_step:
        console.print(f"[red]error:[/red] --kill-after-tasks {args.kill_after_tasks}: a step of {spec.name} has "
                      f"{per_step} tasks (chained stages run as one), so the kill would never happen; "
                      f"use 0..{per_step}")
        return 2
    if args.overwrite:
        spec = _overwriting(spec)
    run_dir = (args.run_dir or Path.cwd() / ".ftpipeline" / spec.name).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = dataclasses.replace(spec, identity=run_identity(spec.name, args.pipeline))
    setup_json_logging(args.log_level, run_dir / "coordinator.log", fresh=not resuming)
    try:
        spec, servers = start_run_servers(console, spec, args, run_dir, resuming)
    except (OSError, RuntimeError, ValueError) as exc:
        console.print(f"[red]error:[/red] {one_line(exc)}")
        return 2
    missing = topic_problems(spec)  # a topic that is not there: said now, not a run waiting for ever
    if missing:
        for problem in missing:
            console.print(f"[red]error:[/red] {problem}")
        servers.stop()
        return 2
    try:  # a failure before the run stops the servers started for it
        prepared = resuming or _prepare_outputs(spec, console)
    except OSError as exc:  # the sinks' storage cannot be read (a bucket out of reach, refused keys)
        console.print(f"[red]error:[/red] the pipeline's output storage: {one_line(exc)}")
        prepared = False
    except BaseException:
        servers.stop()
        raise
    if not prepared:
        servers.stop()
        return 2
    if not resuming:  # a resume takes running workers over: it must not wait for this
        jvmarchive.prepare(console.print, console.status)
    # "where is it stuck?": kill -USR2 <pid> writes every thread's stack to stacks.txt in the run directory
    stacks = (run_dir / "stacks.txt").open("a")
    faulthandler.register(signal.SIGUSR2, file=stacks, all_threads=True)
    cluster = LocalCluster(run_dir, spec.store_key, "", master_for_process(spec.spark_master, spec.workers),
                           dict(spec.spark_conf),
                           heartbeat_timeout_ms=spec.heartbeat_timeout_ms, tls=not args.plaintext_workers,
                           adopt=resuming)  # workers a killed run left running are taken over
    try:  # a failure before the run: the Spark processes started ahead end with it (workers taken over do not)
        if not resuming:  # the first workers' JVMs start while Redis and ZooKeeper do
            cluster.prestart([worker_name(i) for i in range(spec.workers)])
        session = open_session(spec, resuming, private_dir=run_dir)
        cluster.connect(session.redis_url, session.zookeeper if session.commands is not None else None)
        run = _start(console, spec, args, session, cluster, resuming)
    except BaseException:
        cluster.stop_ahead()
        servers.stop()
        raise
    coordinator, observer, timeline, ui = run.coordinator, run.observer, run.timeline, run.ui
    code = 0
    failure: dict[str, Any] | None = None
    interrupted: dict[str, Any] = {}
    try:
        if isinstance(observer, ProgressObserver):
            with observer:
                result = coordinator.run()
        else:
            result = coordinator.run()
    except PipelineFailed as exc:
        console.print(f"[red]pipeline failed:[/red] {exc}")
        if isinstance(exc, TaskFailed):
            console.print(f"  the whole traceback: {cluster.worker_dir(WorkerId(exc.worker)) / 'executor.log'}")
        failure = {"message": str(exc), **(exc.details() if isinstance(exc, TaskFailed) else {})}
        code = 1
    except SpecError as exc:  # found only against the run's state: a checkpoint this spec cannot reopen
        console.print(f"[red]error:[/red] {exc}")
        code = 2
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        code = 130
        if args.summary_json:  # a stream stopped by hand: what it did up to then (while Redis is still there)
            interrupted = result_json(coordinator.result()) | {"interrupted": True}
    except Exception as exc:  # a fault nothing above named: one line here, its traceback in the log
        logging.getLogger("ftpipeline").exception("run failed with an unexpected error")
        console.print(f"[red]pipeline failed:[/red] {one_line(exc)} (unexpected; traceback in {run_dir / 'coordinator.log'})")
        code = 1
    finally:
        coordinator.shutdown()
        cluster.stop()
        session.close()
        if code or not args.verify:
            servers.stop()
    if code:
        if args.summary_json and failure is not None:
            Path(args.summary_json).write_text(json.dumps({"failed": failure}, indent=2, default=str))
        elif args.summary_json and code == 130:
            Path(args.summary_json).write_text(json.dumps(interrupted, indent=2, default=str))
        _report(console, run_dir, spec, timeline, ui, code, None, (failure or {}).get("message", ""))
        return code
    print_summary(console, spec, result, run.ledger.earlier)
    summary = result_json(result) | {"earlier": run.ledger.earlier}
    if args.verify:
        try:
            ok, comparisons = _verify(console, spec, result.committed, run_dir)
        finally:
            servers.stop()
        summary["verify"] = [dataclasses.asdict(c) | {"equal": c.equal, "holds": c.holds} for c in comparisons]
        code = 0 if ok else 1
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary, indent=2, default=str))
    _report(console, run_dir, spec, timeline, ui, code, summary)
    return code


@dataclasses.dataclass
class _Run:
    """What ``cmd_run`` runs and reports through, once the run's stores are up."""

    coordinator: Coordinator
    observer: ProgressObserver | LocalObserver
    timeline: Timeline
    ui: LiveServer | None
    ledger: FaultLedger


def _start(console: Console, spec: PipelineSpec, args: argparse.Namespace, session: Session, cluster: LocalCluster,
           resuming: bool) -> _Run:
    """The run's metrics, fault plan, observers and coordinator."""
    run_dir = cluster.run_dir
    metrics = RunMetrics(spec.name)
    if args.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port, registry=metrics.registry)
    faults = None
    if args.kill_at_step is not None or args.kill_after is not None or args.kill_during_checkpoint:
        faults = FaultPlan(at_step=args.kill_at_step, after_tasks=args.kill_after_tasks, after_seconds=args.kill_after,
                           worker=WorkerId(args.kill_worker) if args.kill_worker else None, seed=args.seed,
                           during_checkpoint=args.kill_during_checkpoint, action=args.fault)
    private = spec.redis_url is None
    console.print(f"[bold]{spec.name}[/bold]: {len(spec.stages)} stages, {spec.workers} workers, "
                  f"Redis {'embedded' if private else redacted(session.redis_url)}, logs in {run_dir}")
    _warn_unbounded(console, spec)
    ledger = FaultLedger(run_dir / LEDGER, fresh=not resuming)
    observer = (ProgressObserver(console, spec.max_steps, ledger) if not args.no_progress
                else LocalObserver(console, ledger))
    timeline, ui = _timeline(console, spec, args.ui_port)
    coordinator = Coordinator(spec, session.store, session.tables, cluster, Fanout(observer, timeline), faults, metrics,
                              pointer=session.pointer, commands=session.commands,
                              resume=resuming, resume_epoch=args.from_checkpoint)
    timeline.follow_placement(lambda: coordinator.placement)
    if args.expire_zookeeper_session and session.zk is not None and session.zookeeper is not None:
        coordinator.ckpt.before_commit = _session_expirer(session.zk, session.zookeeper, console)
    if session.pointer is not None:  # "checkpoint now": kill -USR1 <pid of ftpipeline run>
        signal.signal(signal.SIGUSR1, lambda *_: setattr(coordinator.ckpt, "requested", True))
    return _Run(coordinator, observer, timeline, ui, ledger)


def _timeline(console: Console, spec: PipelineSpec, ui_port: int | None) -> tuple[Timeline, LiveServer | None]:
    """The run report's timeline (``report/``), and with ``--ui-port`` its live page."""
    timeline = Timeline(spec)
    if ui_port is None:
        return timeline, None
    try:
        ui = serve(timeline, ui_port)
    except OSError as exc:  # a port in use costs the live page, not the run
        console.print(f"[yellow]warning:[/yellow] no live report on port {ui_port}: {one_line(exc)}")
        return timeline, None
    console.print(f"live report: {ui.url}", soft_wrap=True)
    return timeline, ui


def _report(console: Console, run_dir: Path, spec: PipelineSpec, timeline: Timeline, ui: LiveServer | None,
            code: int, summary: dict[str, Any] | None, why: str = "") -> None:
    """``report.html`` in the run directory, at the end of every run that started, whatever its outcome
    (``why``: what made it fail, if known)."""
    if ui is not None:
        ui.summary = summary
    outcome = {0: "succeeded", 130: "interrupted"}.get(code, "failed")
    timeline.finish(outcome, why or (f"exit code {code}" if code else ""))
    try:
        path = write_report(run_dir, timeline, spec, summary)
    except Exception as exc:  # the report must not change the run's outcome
        logging.getLogger("ftpipeline").exception("the run report was not written")
        console.print(f"[yellow]warning:[/yellow] the run report was not written: {one_line(exc)}")
        return
    console.print(f"report: {path}", soft_wrap=True)


def _produce_arg(text: str) -> tuple[str, str]:
    topic, sep, path = text.partition("=")
    if not sep or not topic or not path:
        raise argparse.ArgumentTypeError(f"expected TOPIC=FILE, got {text!r}")
    return topic, path


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """File descriptor 2 points to ``path`` inside: a process started then (Spark's JVM) keeps writing there."""
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _verify(console: Console, spec: PipelineSpec, steps: int, work_dir: Path) -> tuple[bool, list[Any]]:
    from ftpipeline.oracle import verify

    with console.status("computing the oracle: the same pipeline as one plain PySpark batch job"):
        work_dir.mkdir(parents=True, exist_ok=True)
        with _stderr_to(work_dir / "oracle.log"):  # the JVM's banner lines go to its log, not the terminal
            spark = build_session("local[2]", {}, work_dir, "ftpipeline-oracle", ORACLE_JAVA_OPTIONS)
        try:
            comparisons = verify(spark, spec, steps, default_dead_letter_root(spec), history_store(spec))
        except (OSError, ValueError) as exc:  # what the run left cannot be read back: said, not a traceback
            console.print(f"[red]cannot verify:[/red] {one_line(exc)}")
            return False, []
        except Exception as exc:  # a fault of the oracle's own: said in one line, its traceback in the log
            logging.getLogger("ftpipeline").exception("verify failed", extra={"pipeline": spec.name})
            console.print(f"[red]cannot verify (the oracle failed):[/red] {type(exc).__name__}: {one_line(exc)}")
            return False, []
        finally:
            spark.stop()
    for c in comparisons:
        console.print(("[green]" if c.equal else "[yellow]" if c.holds else "[red]") + str(c))
    return all(c.holds for c in comparisons), comparisons


def cmd_validate(args: argparse.Namespace) -> int:
    console = _console()
    spec = _load(console, args.pipeline, check_entry_point=not args.image_entry_point)
    if spec is None:
        return 2
    missing = topic_problems(spec)  # only with spec.kafka.bootstrapServers: a private broker's are made by run
    for problem in missing:
        console.print(f"[red]error:[/red] {problem}")
    if missing:
        return 2
    console.print(f"{args.pipeline}: valid ({len(spec.stages)} stages, {spec.workers} workers)")
    _warn_unbounded(console, spec)
    return 0


def _warn_unbounded(console: Console, spec: PipelineSpec) -> None:
    warning = spec.unbounded_warning
    if warning:
        console.print(f"[yellow]warning:[/yellow] checkpoint.intervalSteps and intervalMs are 0, so {warning}")
        logging.getLogger("ftpipeline").warning("checkpoints off", extra={"pipeline": spec.name, "why": warning})


def cmd_verify(args: argparse.Namespace) -> int:
    console = _console()
    spec = _load(console, args.pipeline)
    if spec is None:
        return 2
    run_dir = Path.cwd() / ".ftpipeline" / spec.name
    spec, servers = reopen_run_servers(spec, run_dir)  # the run's private broker and store, as it left them
    try:
        spec = dataclasses.replace(spec, identity=run_identity(spec.name, args.pipeline))
        steps = args.steps or min(barrier_of(s, spec).gt_last() for s in spec.stages if s.is_sink)
        ok, _ = _verify(console, spec, steps, run_dir)
    finally:
        servers.stop()
    return 0 if ok else 1


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ftpipeline")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ftpipeline", description="Fault-tolerant PySpark pipelines.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a pipeline on this machine (workers as local processes)",
                         description="Run an FTPipeline on this machine. Relative paths in the file are resolved "
                                     "against the file's directory. With checkpoints configured, SIGUSR1 asks "
                                     "for a checkpoint now.")
    run.add_argument("pipeline", type=Path, help="FTPipeline YAML file")
    common = run.add_argument_group("the run")
    common.add_argument("--steps", type=int, help="stop after this many committed steps (overrides spec.steps.maxSteps)")
    common.add_argument("--workers", type=int, help="override spec.workers")
    common.add_argument("--verify", action="store_true",
                        help="afterwards, compare the output row for row with the oracle (one plain PySpark batch job)")
    common.add_argument("--overwrite", action="store_true",
                        help="replace existing output and dead-letter files (every sink's existingOutput: overwrite)")
    common.add_argument("--resume", action="store_true",
                        help="continue a previous run of this pipeline from its newest checkpoint on disk")
    common.add_argument("--from-checkpoint", type=int, metavar="EPOCH",
                        help="like --resume, from this committed checkpoint instead of the newest")
    common.add_argument("--produce", action="append", type=_produce_arg, metavar="TOPIC=FILE",
                        help="before a fresh run, write each non-blank line of FILE to TOPIC as a record (repeatable)")
    common.add_argument("--run-dir", type=Path, help="where logs, buffers and the embedded Redis live "
                                                     "(default: ./.ftpipeline/NAME)")
    output = run.add_argument_group("what it shows and keeps")
    output.add_argument("--no-progress", action="store_true", help="no progress bar (plain lines, one per fault)")
    output.add_argument("--summary-json", type=Path, metavar="FILE", help="write the run's figures to FILE as JSON")
    output.add_argument("--metrics-port", type=int, help="serve Prometheus metrics of the coordinator on this port")
    output.add_argument("--ui-port", type=int, metavar="PORT",
                        help="serve the run report live on http://127.0.0.1:PORT/ (0: any free port) while the run "
                             "goes on (report.html is written into the run directory either way)")
    output.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                        help="level of coordinator.log in the run directory (default: INFO)")
    servers = run.add_argument_group("servers (default: private ones, started for the run)")
    servers.add_argument("--redis-url", help="use this Redis (redis://host:port, unix:///path, or over TLS "
                                             "rediss://host:port/0?ssl_ca_certs=CA.pem) instead of a private one")
    servers.add_argument("--zookeeper", metavar="HOSTS", help="use this ZooKeeper (host:port,..., over TLS "
                                                              "host:port,...?ca=CA.pem) instead of a private one")
    servers.add_argument("--kafka", metavar="ENDPOINT", help="use this Kafka cluster (host:port,..., or sasl-ssl://"
                                                             "user:password@hosts?ca=CA.pem; see spec.kafka.bootstrapServers)")
    tuning = run.add_argument_group("execution (overrides of the spec)")
    tuning.add_argument("--checkpoint-every", type=int, metavar="N", help="checkpoint every N steps (overrides spec.checkpoint)")
    tuning.add_argument("--strategy", choices=["lineage", "checkpoint", "auto"], help="override spec.recovery.strategy")
    tuning.add_argument("--mode", choices=["lockstep", "pipelined"], help="override spec.steps.mode")
    tuning.add_argument("--window", type=int, help="pipelined: uncommitted steps in flight (overrides spec.steps.window)")
    tuning.add_argument("--no-chaining", action="store_true",
                        help="run every stage as a task of its own (sets spec.chaining to false)")
    tuning.add_argument("--no-plan-reuse", action="store_true",
                        help="call the pipeline's functions for every task (sets spec.reusePlans to false)")
    tuning.add_argument("--plaintext-workers", action="store_true",
                        help="worker traffic without mutual TLS (to measure what TLS costs; anything that reaches a "
                             "worker's port can then steer it)")
    faults = run.add_argument_group("fault injection (to see a recovery)")
    faults.add_argument("--kill-at-step", type=int, metavar="S",
                        help="SIGKILL a worker while step S is running")
    faults.add_argument("--kill-after-tasks", type=int, default=2, metavar="N",
                        help="with --kill-at-step: kill once N tasks of that step completed (default 2: mid-step)")
    faults.add_argument("--kill-after", type=float, metavar="SECONDS",
                        help="SIGKILL a worker this long after the run started")
    faults.add_argument("--kill-during-checkpoint", action="store_true",
                        help="SIGKILL a worker while a checkpoint is being taken (at or after --kill-at-step)")
    faults.add_argument("--kill-worker", metavar="ID", help="which worker to kill (w0, w1, ...); default: seeded random")
    faults.add_argument("--fault", choices=["kill", "stop", "zombie", "evict"], default="kill",
                        help="what is done to the worker: kill (SIGKILL, default); stop (SIGSTOP: alive but silent, "
                             "found by its heartbeat); zombie (stop, and the kill never reaches it, so it wakes up "
                             "after its recovery and must be fenced off); evict (SIGTERM, as a drain's eviction: it "
                             "hands its channels over and goes, no recovery)")
    faults.add_argument("--expire-zookeeper-session", action="store_true",
                        help="expire the coordinator's ZooKeeper session during a checkpoint commit")
    faults.add_argument("--seed", type=int, default=0, help="seed for choosing the worker to kill (default 0)")
    run.set_defaults(func=cmd_run)

    validate = sub.add_parser("validate", help="check a pipeline file without running it",
                              description="Check an FTPipeline file as run and the operator would, without running "
                                          "it: the schema, the dataflow (stage names, cycles, partitioning), the "
                                          "entry point and the functions the stages name, the input directories, "
                                          "and, with spec.kafka.bootstrapServers, that the topics exist. Every "
                                          "problem is printed with its field path; the exit code is 2 if any.")
    validate.add_argument("pipeline", type=Path, help="FTPipeline YAML file")
    validate.add_argument("--image-entry-point", action="store_true",
                          help="the entry point lives in spec.image: do not import it here (Kubernetes pipelines)")
    validate.set_defaults(func=cmd_validate)

    verify = sub.add_parser("verify", help="compare a pipeline's existing output with the oracle")
    verify.add_argument("pipeline", type=Path, help="FTPipeline YAML file")
    verify.add_argument("--steps", type=int, help="compare steps 1..N (default: every released step)")
    verify.set_defaults(func=cmd_verify)

    add_server_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    trust_store_ca()  # a private object store's CA, for delta-rs (barrier/delta.py), before any thread
    args = build_parser().parse_args(argv)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
