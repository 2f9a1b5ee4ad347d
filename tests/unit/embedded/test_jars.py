"""Pinned jars: each lock names its closure, and a jar whose digest differs is refused."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ftpipeline.embedded import jars as kafkajars
from ftpipeline.embedded.jars import DELTA, KAFKA, Jar


def test_the_lock_pins_the_broker_of_this_version_and_a_logging_binding() -> None:
    jars = KAFKA.locked()
    names = {(j.group, j.artifact): j.version for j in jars}
    assert names[("org.apache.kafka", "kafka_2.13")] == KAFKA.version
    assert ("org.apache.logging.log4j", "log4j-slf4j-impl") in names, "else the broker's logs go nowhere"
    assert len({j.file for j in jars}) == len(jars), "one file per jar on the class path"


def test_the_delta_lock_pins_delta_spark_for_pysparks_spark_line_and_nothing_pyspark_ships() -> None:
    import pyspark

    jars = DELTA.locked()
    names = {j.artifact: j.version for j in jars}
    spark_line = ".".join(pyspark.__version__.split(".")[:2])
    assert names[f"delta-spark_{spark_line}_2.13"] == DELTA.version, "delta-spark built for another Spark"
    shipped = kafkajars._pyspark_artifacts()
    assert not shipped & set(names), "a second copy of a class PySpark has would be a conflict"
    jackson = next(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("jackson-databind-*.jar"))
    assert jackson == f"jackson-databind-{names['jackson-datatype-jdk8']}.jar", "jackson modules of one version"


def repository(root: Path, jars: dict[str, bytes]) -> list[Jar]:
    """A Maven repository layout under ``root`` holding ``jars`` (artifact: content)."""
    out = []
    for artifact, content in jars.items():
        jar = Jar("org.example", artifact, "1.0", hashlib.sha256(content).hexdigest())
        path = root / jar.url_path
        path.parent.mkdir(parents=True)
        path.write_bytes(content)
        out.append(jar)
    return out


def test_fetch_takes_what_is_missing_and_refuses_a_jar_whose_digest_differs(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    jars = repository(tmp_path / "repo", {"good": b"good bytes", "tampered": b"what was pinned"})
    monkeypatch.setenv("FTPIPELINE_MAVEN_REPOSITORY", (tmp_path / "repo").as_uri())
    (tmp_path / "repo" / jars[1].url_path).write_bytes(b"something else")
    target = tmp_path / "jars"
    with pytest.raises(ValueError, match="tampered-1.0.jar: SHA-256 .* is not the locked"):
        kafkajars.fetch(target, jars)
    assert sorted(p.name for p in target.iterdir()) == ["good-1.0.jar"], "no partial or refused file is left"
    (tmp_path / "repo" / jars[1].url_path).write_bytes(b"what was pinned")
    seen: list[str] = []
    assert kafkajars.fetch(target, jars, lambda jar, size: seen.append(jar.artifact)) == [jars[1]]
    assert seen == ["tampered"], "only what was missing is fetched"
    assert kafkajars.missing(target, jars) == []
    # a server in an image runs as another user than the one that fetched them
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in target.iterdir())


def test_a_class_path_with_jars_missing_says_how_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="ftpipeline fetch-jars delta"):
        DELTA.classpath(tmp_path)


def test_a_log_directory_kafka_cannot_format_is_an_error_quoting_it(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    from ftpipeline.embedded import kafka

    monkeypatch.setattr(kafka, "fetch", lambda jars: None)
    monkeypatch.setattr(kafka, "_java_command", lambda jars, main, *args: ["false"])
    failed = subprocess.CompletedProcess([], 1, "", "Exception in thread main\nError: No space left on device\n")
    monkeypatch.setattr(kafka.subprocess, "run", lambda *a, **kw: failed)
    import pytest

    with pytest.raises(RuntimeError, match=r"could not format its log directory .*data: Error: No space left on device"):
        kafka.prepare(tmp_path / "conf", tmp_path / "data", 1, 2, jars=tmp_path)


def test_a_new_clusters_id_never_starts_with_a_dash_the_format_tool_would_read_as_an_option(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import uuid

    from ftpipeline.embedded import kafka

    drawn = iter([uuid.UUID(bytes=b"\xfb" + bytes(15)), uuid.UUID(bytes=bytes(16))])  # the first encodes as "-w..."
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: next(drawn))
    found = kafka.cluster_id()
    assert found == "AAAAAAAAAAAAAAAAAAAAAA" and len(found) == 22
