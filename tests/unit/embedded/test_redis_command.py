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
