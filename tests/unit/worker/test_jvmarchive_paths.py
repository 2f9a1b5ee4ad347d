"""Where the Spark JVM's class archive is looked for, and the options a JVM is given for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftpipeline.worker import jvmarchive


def test_off_means_no_archive_and_no_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvmarchive.ENV, "off")
    assert jvmarchive.archive_path() is None and jvmarchive.java_options() == ""
    assert jvmarchive.build("") is None


def test_a_named_archive_is_used_once_it_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.jsa"
    monkeypatch.setenv(jvmarchive.ENV, str(path))
    assert jvmarchive.java_options() == ""
    path.write_bytes(b"x")
    options = jvmarchive.java_options().split()
    assert options[0] == f"-XX:SharedArchiveFile={path}" and "-Xlog:cds=off" in options


def test_the_cached_name_follows_the_jdk_and_spark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jvmarchive.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    first = jvmarchive.archive_path()
    assert first is not None and first.parent == tmp_path / "ftpipeline" / "jvm"
    other = tmp_path / "jdk2" / "bin" / "java"
    other.parent.mkdir(parents=True)
    other.write_text("")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk2"))
    assert jvmarchive.archive_path() not in (None, first)  # another JDK: another archive
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert jvmarchive.archive_path() is None  # no java at all: nothing to archive
