"""The Spark JVM's class archive: made by a real JVM at its exit, and mapped by the next one's start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftpipeline.worker import jvmarchive
from ftpipeline.worker.session import WORKER_JAVA_OPTIONS

# -Xshare:on: a JVM that cannot map its archive refuses to start, where -Xshare:auto would go on without it
SESSION = """
import sys, tempfile
from pathlib import Path
from ftpipeline.worker.session import build_session
spark = build_session("local[1]", {}, Path(tempfile.mkdtemp()), "archive-check", "-Xshare:on")
print(spark.range(5).selectExpr("sum(id) AS s").collect()[0]["s"])
"""


def test_an_archive_made_once_is_mapped_by_the_next_spark_jvm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "spark.jsa"
    monkeypatch.setenv(jvmarchive.ENV, str(path))
    assert jvmarchive.java_options() == ""
    made = jvmarchive.build(WORKER_JAVA_OPTIONS)
    assert made == path and path.stat().st_size > 10_000_000
    assert path.read_bytes()[:4] == (0xF00BABA8).to_bytes(4, "little")  # the JDK's dynamic archive magic, 0xf00baba8
    assert not list(tmp_path.glob("*.partial"))
    assert f"-XX:SharedArchiveFile={path}" in jvmarchive.java_options()
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}  # an earlier session's JVM options
    done = subprocess.run([sys.executable, "-c", SESSION], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "10"
    assert jvmarchive.build(WORKER_JAVA_OPTIONS) == path  # there: nothing made again
