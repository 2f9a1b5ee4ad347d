"""The Spark session of a worker's Spark process (and of the oracle and the tests): local, tuned for
many small jobs, with the pinned Delta Lake jars when its settings name Delta's extension (user code reading
Delta tables itself; a Delta sink needs none: its sidecar commits the steps)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ftpipeline.barrier.delta import wants_delta
from ftpipeline.embedded.jars import DELTA
from ftpipeline.spec.cores import cores_of
from ftpipeline.worker import jvmarchive

# A worker's JVM runs one small Spark job per task: planning, analysis and codegen, far more than
# tight loops over rows. Its C2 compiler kept recompiling that code for minutes, on cores the
# other workers need (each worker is a JVM of its own). With C1 alone and the serial collector
# (one executor thread, a small heap), a stateless step of 25k rows per worker (two workers, two
# cores) took 0.15-0.17 s instead of 0.21-0.22 s after 60 steps, and 0.21-0.23 s instead of
# 0.33-0.35 s over the first 20. FTPIPELINE_WORKER_JAVA_OPTIONS replaces them.
WORKER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# The oracle's JVM (``--verify``, ``ftpipeline verify``) lives for one comparison: a dozen jobs over small
# plans, which C2 never pays back either. With these options verifying examples/page-views took 13.0-13.3 s
# instead of 16.7-16.8 s (two runs of each, alternated, on two cores).
ORACLE_JAVA_OPTIONS = WORKER_JAVA_OPTIONS


def build_session(master: str, conf: dict[str, str], work_dir: Path, app: str, java_options: str = "") -> Any:
    """A local SparkSession tuned for many small jobs (one per task)."""
    # JVM options must be given at launch: the builder's settings arrive too late. PySpark reads them from the
    # environment when it starts the JVM; they are taken out again afterwards, so a process this one starts (a
    # run's workers, the CLI's oracle) launches its JVM with its own options, not this one's. A value the user set
    # is used as it is and left.
    java_options = " ".join(filter(None, [java_options, jvmarchive.java_options()]))
    log4j = Path(__file__).resolve().parent.parent / "obs" / "log4j2.properties"
    users = os.environ.get("PYSPARK_SUBMIT_ARGS")
    os.environ["PYSPARK_SUBMIT_ARGS"] = users if users is not None else (
        f'--driver-java-options "-Dlog4j2.configurationFile=file:{log4j} -Dderby.system.home={work_dir / "derby"}'
        f'{" " + java_options if java_options else ""}" pyspark-shell')
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Spark's Python workers (a UDF, a keyed function) run this process's interpreter, which has the libraries
    # the user's code imports; PySpark's default, the first python3 on the PATH, may be another one (outside a
    # virtualenv that is not activated). Read as the context starts; a value the user set wins.
    python = os.environ.get("PYSPARK_PYTHON")
    if python is None and "spark.pyspark.python" not in conf:
        os.environ["PYSPARK_PYTHON"] = sys.executable
    try:
        return _session(master, conf, work_dir, app)
    finally:
        if users is None:
            os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
        if python is None:
            os.environ.pop("PYSPARK_PYTHON", None)


def _session(master: str, conf: dict[str, str], work_dir: Path, app: str) -> Any:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores_of(master)))  # a shuffle per task thread
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(work_dir / "spark-tmp"))
        .config("spark.sql.warehouse.dir", str(work_dir / "spark-warehouse"))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")  # small jobs: adapting costs more planning than it saves
    )
    conf = dict(conf)
    if wants_delta(conf):  # Delta's extension asked for: the pinned delta-spark closure (fetched on first use)
        DELTA.fetch()
        conf["spark.jars"] = ",".join([*filter(None, [conf.get("spark.jars", "")]), *map(str, DELTA.paths())])
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
