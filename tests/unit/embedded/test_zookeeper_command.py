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
    config = dict(line.split("=", 1) for line in Path(args[-1]).read_text().splitlines())
    assert (config["clientPort"], config["dataDir"], config["tickTime"]) == ("2181", str(tmp_path), "500")


def test_a_tls_server_serves_plaintext_on_the_loopback_probe_port_alone(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    from ftpipeline.worker.tls import generate

    tls = generate("stores", ("localhost",)).write(tmp_path / "tls")
    args = zookeeper_command(tmp_path / "data", 2181, tls_dir=tls, probe_port=2182, conf_dir=tmp_path / "conf")
    config = dict(line.split("=", 1) for line in Path(args[-1]).read_text().splitlines())
    assert config["secureClientPort"] == "2181"
    assert (config["clientPort"], config["clientPortAddress"]) == ("2182", "127.0.0.1")
    keystore = Path(config["ssl.keyStore.location"])
    assert keystore.parent == tmp_path / "conf" and keystore.stat().st_mode & 0o777 == 0o600
    pem = keystore.read_bytes()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----"), "PKCS#8, the one form ZooKeeper's PEM reader takes"
    serialization.load_pem_private_key(pem, password=None)
    with pytest.raises(ValueError, match="probe port"):
        zookeeper_command(tmp_path / "data", 2181, tls_dir=tls)


def test_a_member_of_an_ensemble_names_every_member_and_itself(tmp_path: Path) -> None:
    from ftpipeline.embedded.zookeeper import Ensemble

    hosts = ("zk-0.zk-members", "zk-1.zk-members", "127.0.0.1:12888:13888")
    args = zookeeper_command(tmp_path / "data", 2181, ensemble=Ensemble(hosts, my_id=2), conf_dir=tmp_path / "conf")
    assert args[-2] == "org.apache.zookeeper.server.quorum.QuorumPeerMain"
    config = dict(line.split("=", 1) for line in Path(args[-1]).read_text().splitlines())
    assert config["server.1"] == "zk-0.zk-members:2888:3888"
    assert config["server.3"] == "127.0.0.1:12888:13888"
    assert (tmp_path / "data" / "myid").read_text().strip() == "2"
    assert zookeeper_command(tmp_path / "alone", 2181)[-2] == "org.apache.zookeeper.server.ZooKeeperServerMain"


@pytest.mark.parametrize(("members", "my_id", "error"), [
    (("a", "b"), 1, "odd number of members, at least 3"),
    (("a", "b", "c", "d"), 1, "odd number"),
    (("a", "b", "c"), 4, "--id 4: not one of the 3 members' ids"),
    (("a:2181", "b", "c"), 1, "member 'a:2181' is host or host:quorum-port:election-port"),
])
def test_an_ensemble_that_cannot_keep_a_majority_is_refused_naming_the_flag(members: tuple[str, ...], my_id: int,
                                                                            error: str) -> None:
    from ftpipeline.embedded.zookeeper import Ensemble

    with pytest.raises(ValueError, match=error):
        Ensemble(members, my_id)


def test_a_statefulset_pods_member_id_is_its_ordinal_plus_one() -> None:
    from ftpipeline.embedded.zookeeper import member_id

    assert member_id("ftp-zookeeper-0") == 1 and member_id("ftp-zookeeper-4") == 5
    with pytest.raises(ValueError, match="StatefulSet ordinal"):
        member_id("zookeeper")
