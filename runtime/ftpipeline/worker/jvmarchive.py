"""A class-data-sharing archive of the worker's Spark JVM: the classes Spark loads at start, kept mapped.

Why: a worker's Spark JVM spends most of its start loading and verifying the same ~10,000 classes
every time (~13 s for a session and its first queries on a busy two-core machine, where two
workers start side by side). The JDK can write the classes a JVM loaded into an archive
(``-XX:ArchiveClassesAtExit``) and map it at the next start (``-XX:SharedArchiveFile``): the same
start took ~6 s with one. The archive belongs to one JDK and one Spark installation, so its name
carries a digest of both (``archive_path``); a JVM given an archive that does not fit its class
path ignores it, silently (``-Xshare:auto``, CDS logging off), and runs as before.

States of the archive, per machine (or image):

    ABSENT  --build() (ftpipeline run, once; ftpipeline jvm-archive; the image's build)--> a JVM
            dumps into a temporary file at a clean exit, renamed into place: PRESENT
    PRESENT --a worker, the oracle, a test session starts--> used (``java_options``)
    PRESENT --JDK or PySpark upgraded--> a new name: ABSENT for them (the old file is left)

``FTPIPELINE_JVM_ARCHIVE``: a path to use (and build) instead of the cache directory's, or ``off``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from ftpipeline.embedded.jars import cache_root

ENV = "FTPIPELINE_JVM_ARCHIVE"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # an archive that does not fit is ignored without a word


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else (Path(p) if (p := shutil.which("java")) else None)
    return found.resolve() if found is not None and found.exists() else None


def archive_path() -> Path | None:
    """Where this JDK's and this Spark's archive is (None: turned off, or no JDK found)."""
    configured = os.environ.get(ENV)
    if configured == "off":
        return None
    if configured:
        return Path(configured)
    java = _java()
    if java is None:
        return None
    import pyspark

    spark_home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    jars = sorted((spark_home / "jars").glob("*.jar"))
    identity = "\n".join([str(java), str(java.stat().st_mtime_ns), pyspark.__version__, *map(str, jars)])
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return cache_root() / "jvm" / f"spark-{pyspark.__version__}-{digest}.jsa"


def java_options() -> str:
    """The JVM options that map the archive, if there is one; else none."""
    path = archive_path()
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path is not None and path.is_file() else ""


def build(java_options_: str, timeout_s: float = 600) -> Path | None:
    """Make the archive if it is missing (one process at a time): a Spark session runs the kinds of work a
    worker does, ends cleanly, and its JVM writes what it loaded. The archive, or None (turned off, or the
    JVM could not write one: then nothing changes)."""
    path = archive_path()
    if path is None or path.is_file():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    with open(path.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run building it: wait for theirs
        if path.is_file():
            return path
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        with tempfile.TemporaryDirectory(prefix="ftpipeline-jvm-archive-") as work:
            env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
            try:
                done = subprocess.run([sys.executable, "-m", "ftpipeline.worker.jvmarchive", work,
                                       f"{java_options_} -XX:ArchiveClassesAtExit={partial} {QUIET}"],
                                      env=env, capture_output=True, text=True, timeout=timeout_s)
            except (OSError, subprocess.TimeoutExpired):
                done = None
        if done is None or done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            return None
        partial.rename(path)
    return path


def prepare(say: Callable[[str], None], status: Callable[[str], AbstractContextManager[object]]) -> Path | None:
    """``build`` for a command line: what it does said first (it takes ~30 s, once), the outcome after."""
    path = archive_path()
    if path is None or path.is_file():
        return path
    from ftpipeline.worker.session import WORKER_JAVA_OPTIONS

    with status("making the Spark JVM's class archive (once per machine and Spark version; ~30 s) ..."):
        made = build(os.environ.get("FTPIPELINE_WORKER_JAVA_OPTIONS", WORKER_JAVA_OPTIONS))
    say(f"the Spark JVM's class archive is {made}: workers start faster from now on" if made else
        "the Spark JVM's class archive could not be made; workers start without it, as before")
    return made


def _exercise(work: Path, options: str) -> None:
    """What a worker's JVM does, in small: Arrow in and out, a grouped aggregate, hashing, Parquet and JSON."""
    import pyarrow as pa

    from ftpipeline.worker.session import build_session

    os.environ[ENV] = "off"  # this session writes the archive: it must not map an older one
    spark = build_session("local[1]", {}, work, "ftpipeline-jvm-archive", options)
    frame = spark.createDataFrame(pa.table({"k": ["a", "b", "a"], "v": [1, 2, 3]}))
    frame.toArrow()
    grouped = frame.groupBy("k").agg({"v": "sum"})
    grouped.toArrow()
    frame.selectExpr("pmod(hash(k), 4) AS c", "v").toArrow()
    frame.write.parquet(str(work / "p"))
    spark.read.parquet(str(work / "p")).filter("v > 1").toArrow()
    (work / "j.json").write_text('{"k": "a", "v": 1}\n')
    spark.read.json(str(work / "j.json")).toArrow()
    jvm = spark.sparkContext._gateway.proc  # the JVM pyspark started, which writes the archive as it exits
    spark.stop()
    jvm.stdin.close()  # its gateway ends the JVM when its input does
    jvm.wait(300)


if __name__ == "__main__":
    _exercise(Path(sys.argv[1]), sys.argv[2])
