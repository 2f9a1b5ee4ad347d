"""``ftpipeline run`` as a user runs it: bad input, malformed records, failing user code."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
import yaml
from kazoo.client import KazooClient

from ftpipeline.embedded.ports import free_port
from ftpipeline.oracle import compare
from ftpipeline.spec import load_pipeline

from .pipelines import EXAMPLE, clickstream, run_cli


def _broken(tmp_path: Path, edit: str) -> Path:
    doc = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
    doc["spec"]["entryPoint"] = str(EXAMPLE / "clickstream.py")
    stages = doc["spec"]["stages"]
    if edit == "unknown field":
        doc["spec"]["wrokers"] = 3
    elif edit == "wrong type":
        stages[1]["parallelism"] = "three"
    elif edit == "cycle":
        stages[1]["inputs"].append({"stage": "per-user"})
    elif edit == "missing entry point":
        doc["spec"]["entryPoint"] = "no_such_module.py"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ("unknown field", "spec.wrokers: unknown field"),
        ("wrong type", "spec.stages[1].parallelism: must be an integer"),
        ("cycle", "spec.stages[1].inputs: cycle: clean -> per-user -> clean"),
        ("missing entry point", "spec.entryPoint: cannot import 'no_such_module.py'"),
    ],
)
def test_invalid_pipeline_fails_before_any_worker_starts(tmp_path: Path, edit: str, field: str) -> None:
    run = run_cli(_broken(tmp_path, edit), tmp_path / "run", timeout_s=60)
    assert run.code == 2
    assert field in " ".join(run.output.split()), run.output
    assert not (tmp_path / "run" / "workers").exists()


def test_a_kill_after_more_tasks_than_a_step_has_is_refused_before_any_worker_starts(tmp_path: Path) -> None:
    """Chained stages run as one task, so a step of the example has 6 tasks (3 channels twice), not 12."""
    pipeline = clickstream(tmp_path, "kill-too-late", steps=2)
    run = run_cli(pipeline, tmp_path / "run", "--kill-at-step", "2", "--kill-after-tasks", "7", timeout_s=60)
    assert run.code == 2
    assert "--kill-after-tasks 7: a step of kill-too-late has 6 tasks" in " ".join(run.output.split()), run.output
    assert not (tmp_path / "run" / "workers").exists()


MODULE = '''
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

def enrich(df):
    return df.withColumn("amount_eur", F.col("amount_cents") / 100.0)

def explode(df):
    raise ValueError("bad day")

def explode_later(df):
    @F.udf(returnType=LongType())
    def checked(amount):
        if amount == 310:
            raise ValueError(f"amount {amount} is over the limit")
        return amount
    return df.withColumn("checked", checked("amount_cents"))
'''


def _files_pipeline(tmp_path: Path, function: str = "enrich") -> tuple[Path, int]:
    data = tmp_path / "in"
    data.mkdir()
    malformed = 0
    for f in range(4):
        lines = []
        for i in range(25):
            n = f * 100 + i
            if i % 9 == 4:
                lines.append('{"user_id": "u1", "amount_cents": "lots"}')  # wrong type
                malformed += 1
            elif i % 11 == 7:
                lines.append("{not json")
                malformed += 1
            else:
                lines.append(json.dumps({"user_id": f"u{n % 7}", "amount_cents": n}))
        (data / f"part-{f}.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "enrich.py").write_text(MODULE)
    (tmp_path / "files.yaml").write_text(textwrap.dedent(f"""\
        apiVersion: ftpipeline.io/v1alpha1
        kind: FTPipeline
        metadata: {{name: files}}
        spec:
          image: x
          entryPoint: enrich.py
          workers: 2
          deadLetter: {{path: dead}}
          stages:
            - name: orders
              parallelism: 2
              source:
                file: {{path: in, format: jsonl, rowsPerStep: 14, schema: {{user_id: string, amount_cents: long}}}}
            - {{name: enrich, parallelism: 2, inputs: [{{stage: orders}}], transform: {{function: {function}}}}}
            - {{name: out, parallelism: 2, inputs: [{{stage: enrich}}], sink: {{parquet: {{path: out}}}}}}
        """))
    return tmp_path / "files.yaml", malformed


def test_malformed_records_go_to_the_dead_letter_output_and_steps_commit(tmp_path: Path, spark: object) -> None:
    pipeline, malformed = _files_pipeline(tmp_path)
    run = run_cli(pipeline, tmp_path / "run", private=True)  # embedded Redis and ZooKeeper: nothing configured
    assert run.code == 0, run.output
    assert run.summary["committed"] >= 7  # 100 rows over 2 channels, 7 per channel per step
    phases = run.summary["phases"]  # where a step's time goes (obs/phases.py): every step measured, no recovery
    assert phases["steps"] == run.summary["committed"] and phases["phases"]["tasks"] > 0
    # one chained task a channel; a Spark job each on the first step, which builds the plan, then none: the
    # enrich function's projection runs on Arrow compute (dataflow/arrow_plans.py)
    assert phases["tasks"]["tasks"] == 2 and 0 < phases["tasks"]["jobs"] * run.summary["committed"] <= 2 * 2
    assert run.summary["stats"]["dead_letters"] == malformed
    letters = [json.loads(line) for f in sorted((tmp_path / "dead").rglob("*.jsonl")) for line in f.read_text().splitlines()]
    assert len(letters) == malformed
    assert {r["record"] for r in letters} == {'{"user_id": "u1", "amount_cents": "lots"}', "{not json"}
    assert all(r["stage"] == "orders" and ".jsonl:" in r["location"] for r in letters)
    assert any("field 'amount_cents'" in r["reason"] for r in letters)
    [result] = compare(spark, load_pipeline(pipeline), run.summary["committed"])
    assert result.equal and result.actual_rows == 100 - malformed, result


def test_a_recovery_replays_no_dead_letter_twice(tmp_path: Path) -> None:
    """A worker killed mid-run: its source tasks re-run and meet the same malformed records again.
    Files, count and ``--verify`` (which reads the input itself) all see each one once."""
    pipeline, malformed = _files_pipeline(tmp_path)
    # every task a Spark job (no plan reuse): on Arrow compute step 3's tasks are done before the kill lands,
    # and no source task needs to run again
    run = run_cli(pipeline, tmp_path / "run", "--kill-at-step", "3", "--verify", "--no-plan-reuse")
    assert run.code == 0, run.output
    assert run.summary["recoveries"], run.output
    assert run.summary["stats"].get("recovery_tasks", 0) > 0, run.summary["stats"]
    assert run.summary["stats"]["dead_letters"] == malformed == run.summary["dead_letters"]
    assert run.summary["source_rows"] == 100  # each input record once, the killed worker's too
    letters = [line for f in (tmp_path / "dead").rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert len(letters) == malformed
    verdicts = {c["sink"]: c for c in run.summary["verify"]}
    assert verdicts["dead letters"]["equal"] and verdicts["dead letters"]["actual_rows"] == malformed
    assert verdicts["out"]["equal"]
    assert f"dead letters: equals the oracle: {malformed} records" in " ".join(run.output.split())
    assert "Setting default log level" not in run.output and "incubator" not in run.output  # the JVM's, in its log


@pytest.mark.parametrize(("function", "said", "line"), [
    ("explode", "stage 'enrich' (function explode) raised ValueError: bad day at enrich.py:{line} in explode",
     "raise ValueError(\"bad day\")"),
    ("explode_later", "stage 'enrich' (function explode_later) raised ValueError: amount 310 is over the limit at "
                      "enrich.py:{line} in checked", "raise ValueError(f\"amount"),
])
def test_an_exception_in_user_code_fails_the_run_naming_the_stage_the_error_and_the_users_line(
        tmp_path: Path, function: str, said: str, line: str) -> None:
    """Raised while the stage's function builds its plan, or later in Spark's Python worker (a UDF): either way
    the terminal and the summary name the stage (not the chain's first stage, ``orders``), the exception and
    the user's own line; the traceback stays in the worker's log."""
    pipeline, _ = _files_pipeline(tmp_path, function=function)
    number = next(i for i, text in enumerate(MODULE.splitlines(), 1) if line in text)
    run = run_cli(pipeline, tmp_path / "run")
    assert run.code == 1
    wanted = said.format(line=number)
    assert wanted in " ".join(run.output.split()), run.output
    failed = run.summary["failed"]
    assert failed["error"] == wanted and failed["user"]["line"] == number and failed["user"]["stage"] == "enrich"
    log = (tmp_path / "run" / "workers" / failed["worker"] / "executor.log").read_text()
    assert "Traceback (most recent call last)" in log


def test_existing_output_is_not_overwritten_silently(tmp_path: Path, redis_url: str) -> None:
    pipeline = clickstream(tmp_path, "again", steps=2, workers=1, rows_per_step=500,
                           parallelism={"events": 1, "clean": 1, "per-user": 1, "output": 1})
    assert run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url).code == 0
    second = run_cli(pipeline, tmp_path / "run2", "--redis-url", redis_url, timeout_s=60)
    assert second.code == 2 and "--overwrite" in second.output
    assert run_cli(pipeline, tmp_path / "run3", "--redis-url", redis_url, "--overwrite").code == 0


def _serve(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "ftpipeline.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _until(check: Callable[[], object], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            check()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_serve_redis_and_zookeeper_are_real_servers(tmp_path: Path) -> None:
    """The chart's in-cluster Redis and ZooKeeper come from the project image through these commands."""
    rport, zport = free_port(), free_port()
    servers = [_serve(["serve-redis", "--port", str(rport), "--bind", "127.0.0.1", "--dir", str(tmp_path / "r")]),
               _serve(["serve-zookeeper", "--port", str(zport), "--dir", str(tmp_path / "z")])]
    try:
        r = redis.Redis(port=rport)
        _until(r.ping, 30)
        assert r.set("k", "v") and r.get("k") == b"v"
        r.close()
        zk = KazooClient(hosts=f"127.0.0.1:{zport}")
        zk.start(timeout=60)
        zk.ensure_path("/ftpipeline/probe")
        assert zk.exists("/ftpipeline/probe")
        zk.stop()
        zk.close()
    finally:
        for p in servers:
            p.terminate()
            p.wait(30)


def test_serve_kafka_is_a_real_broker_that_keeps_its_log_across_a_restart(tmp_path: Path) -> None:
    """The chart's optional in-cluster broker: the pinned jars, KRaft formatted once, the data kept on --dir."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from ftpipeline.embedded.kafka import serving

    port, controller = free_port(), free_port()
    args = ["serve-kafka", "--port", str(port), "--controller-port", str(controller), "--bind", "127.0.0.1",
            "--dir", str(tmp_path / "k")]
    bootstrap = f"127.0.0.1:{port}"
    broker = _serve(args)
    try:
        _until(lambda: serving(bootstrap) or (_ for _ in ()).throw(RuntimeError("not yet")), 90)
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures fail if it is collected first
        for future in admin.create_topics([NewTopic("t", 1, 1)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        producer.produce("t", value=b"kept")
        assert producer.flush(30) == 0
        broker.terminate()
        broker.wait(60)
        broker = _serve(args)  # formatted already: the same cluster, the same log
        _until(lambda: serving(bootstrap) or (_ for _ in ()).throw(RuntimeError("not yet")), 90)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["t"])
        deadline, got = time.monotonic() + 30, None
        while got is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            got = message.value() if message is not None and message.error() is None else None
        consumer.close()
        assert got == b"kept"
    finally:
        broker.terminate()
        broker.wait(60)


def test_a_pipeline_runs_and_recovers_as_its_own_redis_user_and_zookeeper_identity_over_tls(tmp_path: Path) -> None:
    """The servers as the chart runs them (a Redis admin password, a ZooKeeper super user, TLS alone on the
    client ports); the pipeline given only its own user and identity, as the operator gives them, over TLS
    trusting the servers' CA. Every command the run sends, a recovery's and a checkpoint's included, must be
    one its access allows; the output equals the oracle."""
    from ftpipeline.commandlog import zkaccess
    from ftpipeline.commandlog.zkclient import connect, with_identity
    from ftpipeline.control import access
    from ftpipeline.worker.tls import generate

    from .pipelines import identity_of

    tls = generate("stores", ("localhost",)).write(tmp_path / "tls")
    ca = tls / "ca.crt"
    (tmp_path / "admin").write_text("redis-admin\n")
    (tmp_path / "super").write_text("zk-super\n")
    rport, zport, probe = free_port(), free_port(), free_port()
    servers = [_serve(["serve-redis", "--port", str(rport), "--bind", "127.0.0.1", "--dir", str(tmp_path / "r"),
                       "--admin-password-file", str(tmp_path / "admin"), "--tls-dir", str(tls),
                       "--unixsocket", str(tmp_path / "redis.sock")]),
               _serve(["serve-zookeeper", "--port", str(zport), "--dir", str(tmp_path / "z"),
                       "--super-password-file", str(tmp_path / "super"), "--tls-dir", str(tls),
                       "--probe-port", str(probe)])]
    try:
        admin = redis.Redis.from_url(f"rediss://:redis-admin@localhost:{rport}/0?ssl_ca_certs={ca}")
        _until(admin.ping, 30)
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis.from_url(f"rediss://localhost:{rport}/0?ssl_ca_certs={ca}").set("k", "v")
        with pytest.raises(redis.exceptions.ConnectionError):
            redis.Redis(port=rport, password="redis-admin", socket_timeout=5).ping()  # plaintext: refused
        pipeline = clickstream(tmp_path, "acl", steps=8, workers=2, rows_per_step=3000, checkpoint_every=3)
        key = identity_of(pipeline)
        user = access.grant(admin, key, "pipeline-redis")
        hosts = f"localhost:{zport}?ca={ca}"
        super_client = connect(with_identity(hosts, zkaccess.SUPER_USER, "zk-super"), start_timeout_s=60)
        zk_user = zkaccess.grant(super_client, key, "pipeline-zk")
        run = run_cli(pipeline, tmp_path / "run", "--kill-at-step", "4", "--verify",
                      "--redis-url", access.with_credentials(f"rediss://localhost:{rport}/0?ssl_ca_certs={ca}", user,
                                                             "pipeline-redis"),
                      "--zookeeper", with_identity(hosts, zk_user, "pipeline-zk"))
        assert run.code == 0, run.output
        assert run.summary["recoveries"], run.output
        assert all(v["equal"] for v in run.summary["verify"]), run.summary["verify"]
        assert "pipeline-redis" not in run.output and "pipeline-zk" not in run.output, "no credential in the output"
        super_client.stop()
        super_client.close()
    finally:
        for p in servers:
            p.terminate()
            p.wait(30)


def test_a_worker_that_cannot_import_the_entry_point_ends_the_run_at_once_and_is_never_replaced(
        tmp_path: Path) -> None:
    """The module imports where the run was validated but not in the workers (as when the image's copy is not
    the one validated): each worker exits saying why (``worker/exits.py``), and the run fails on the first with
    that reason, instead of recovering and replacing workers that would exit the same way."""
    pipeline, _ = _files_pipeline(tmp_path)
    (tmp_path / "enrich.py").write_text(
        "import sys\n"
        "if sys.argv[0].endswith('executor.py'):\n"
        "    raise ImportError('pyspark_extras is not installed here')\n" + MODULE)
    run = run_cli(pipeline, tmp_path / "run", timeout_s=300)
    said = " ".join(run.output.split())
    assert run.code == 1, run.output
    assert "cannot run: invalid pipeline: spec.entryPoint: cannot import 'enrich.py': ImportError: " \
           "pyspark_extras is not installed here" in said, run.output
    workers = sorted(p.name for p in (tmp_path / "run" / "workers").iterdir())
    assert workers == ["w0", "w1"], workers  # none replaced
    assert "recover" not in (tmp_path / "run" / "coordinator.log").read_text().lower()


def test_a_source_directory_that_does_not_exist_fails_validate_and_run_at_once_naming_it(tmp_path: Path) -> None:
    pipeline, _ = _files_pipeline(tmp_path)
    (tmp_path / "in").rename(tmp_path / "elsewhere")
    wanted = f"spec.stages[0].source.file.path: {tmp_path / 'in'} does not exist"
    checked = subprocess.run([sys.executable, "-m", "ftpipeline.cli", "validate", str(pipeline)],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode != 0 and wanted in " ".join(checked.stdout.split()), checked.stdout + checked.stderr
    run = run_cli(pipeline, tmp_path / "run", timeout_s=120)
    assert run.code == 2 and wanted in " ".join(run.output.split()), run.output
    assert not (tmp_path / "run" / "workers").exists()
