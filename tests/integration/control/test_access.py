"""Each pipeline's own Redis user, on a real password-protected redis-server: another pipeline's keys, the
admin commands and the server's data stay out of reach, and the users survive a restart."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ftpipeline.control import access
from ftpipeline.control.store import RunStore
from ftpipeline.embedded.redis import prepare_acl_file, redis_command
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.lineage.tables import LineageTables

ADMIN = "admin-secret"
A, B = "team-a.clicks.uid-1", "team-b.clicks.uid-2"


class Server:
    def __init__(self, directory: Path) -> None:
        self.admin = ADMIN
        self.directory = directory
        self.socket = directory / "redis.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, user: str = "", password: str = "") -> str:
        return access.with_credentials(f"unix://{self.socket}", user, password) if user else \
            f"unix://:{password or self.admin}@{self.socket}"

    def start(self) -> None:
        aclfile = prepare_acl_file(self.directory, self.admin)
        self.proc = subprocess.Popen([*redis_command(self.directory, unixsocket=self.socket, aclfile=aclfile)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                redis.Redis.from_url(self.url()).ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    s.start()
    yield s
    s.stop()


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5)


def test_a_pipeline_user_reaches_its_own_keys_and_nothing_else(server: Server) -> None:
    admin = _client(server.url())
    users = {key: access.grant(admin, key, password) for key, password in ((A, "pw-a"), (B, "pw-b"))}
    a, b = _client(server.url(users[A], "pw-a")), _client(server.url(users[B], "pw-b"))
    # each uses the runtime's own tables, as a coordinator and a sidecar do
    for client, key in ((a, A), (b, B)):
        LineageTables(client, key).clear()
        RunStore(client, key).mark_generation("g1")
        RunStore(client, key).register(WorkerId("w0"), {"address": "10.0.0.1:7000"})
    before = {k: admin.dump(k) for k in admin.scan_iter(match=f"ftp:{{{B}}}:*")}
    assert before, "pipeline B wrote its keys"

    for key in before:
        for attempt in (lambda k=key: a.get(k), lambda k=key: a.set(k, b"x"), lambda k=key: a.delete(k),
                        lambda k=key: a.dump(k), lambda k=key: a.rename(k, f"ftp:{{{A}}}:stolen")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                attempt()
    for admin_only in (lambda: a.flushall(), lambda: a.config_get("*"), lambda: a.keys("*"),
                       lambda: a.acl_list(), lambda: a.acl_setuser(users[A], enabled=True, keys=["*"]),
                       lambda: a.publish("ch", "x"), lambda: a.publish(LineageTables(b, B).ready_channel, "w0")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            admin_only()
    # its own completions it announces, as a sidecar does
    LineageTables(a, A).announce(WorkerId("w0"))
    # a Lua script runs with its caller's rights
    with pytest.raises(redis.exceptions.ResponseError, match="(?i)no permissions|NOPERM"):
        a.eval("return redis.call('get', KEYS[1])", 1, next(iter(before)))
    # nobody gets in without a password, or with a wrong one
    for url in (f"unix://{server.socket}", server.url(users[A], "pw-b")):
        with pytest.raises((redis.exceptions.AuthenticationError, redis.exceptions.ResponseError)):
            _client(url).set(f"ftp:{{{A}}}:x", 1)
    # B's keys are as they were
    assert {k: admin.dump(k) for k in admin.scan_iter(match=f"ftp:{{{B}}}:*")} == before


def test_a_key_pattern_cannot_be_widened_by_a_crafted_store_key(server: Server) -> None:
    admin = _client(server.url())
    user = access.grant(admin, "*", "pw")  # not a store key the operator makes; the pattern is escaped anyway
    mine = _client(server.url(user, "pw"))
    admin.set(f"ftp:{{{A}}}:k", b"v")
    with pytest.raises(redis.exceptions.NoPermissionError):
        mine.get(f"ftp:{{{A}}}:k")
    mine.set("ftp:{*}:k", b"mine")


def test_users_survive_a_restart_and_a_revoked_one_is_gone(server: Server) -> None:
    admin = _client(server.url())
    user_a = access.grant(admin, A, "pw-a")
    user_b = access.grant(admin, B, "pw-b")
    access.revoke(admin, B)
    admin.close()
    server.stop()
    server.start()
    _client(server.url(user_a, "pw-a")).set(f"ftp:{{{A}}}:after-restart", 1)
    with pytest.raises((redis.exceptions.AuthenticationError, redis.exceptions.ResponseError)):
        _client(server.url(user_b, "pw-b")).ping()
    # granting again resets the rules, and a new password replaces the old one
    access.grant(_client(server.url()), A, "pw-a2")
    with pytest.raises((redis.exceptions.AuthenticationError, redis.exceptions.ResponseError)):
        _client(server.url(user_a, "pw-a")).ping()
    assert _client(server.url(user_a, "pw-a2")).get(f"ftp:{{{A}}}:after-restart") == b"1"


def test_the_admin_password_rotates_on_restart(server: Server) -> None:
    user = access.grant(_client(server.url()), A, "pw-a")
    server.stop()
    server.admin = "rotated"
    server.start()
    with pytest.raises((redis.exceptions.AuthenticationError, redis.exceptions.ResponseError)):
        _client(server.url(password=ADMIN)).ping()
    assert _client(server.url(user, "pw-a")).ping(), "the pipelines' users were kept"
