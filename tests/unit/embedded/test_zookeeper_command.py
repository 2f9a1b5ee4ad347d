"""zookeeper_command: the JVM options ZooKeeper runs with (the embedded server and the chart's serve-zookeeper)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftpipeline.embedded.zookeeper import ZOOKEEPER_JAVA_OPTIONS, zookeeper_command


def jvm_options(args: list[str]) -> list[str]:
    return args[1:args.index("-cp")]


def test_zookeeper_runs_with_c1_alone_and_the_serial_collector_by_default(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FTPIPELINE_ZOOKEEPER_JAVA_OPTIONS", raising=False)
    options = jvm_options(zookeeper_command(tmp_path, 2181))
    assert options == ZOOKEEPER_JAVA_OPTIONS.split()
    assert "-XX:TieredStopAtLevel=1" in options and "-XX:+UseSerialGC" in options


def test_the_environment_replaces_the_options_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FTPIPELINE_ZOOKEEPER_JAVA_OPTIONS", "-Xmx1g -XX:+UseG1GC")
    args = zookeeper_command(tmp_path, 2181)
    assert jvm_options(args) == ["-Xmx1g", "-XX:+UseG1GC"]
    assert args[-3:] == ["2181", str(tmp_path), "500"]
