"""Checks of worker credentials a pipeline brings itself: each way they would fail every handshake is named."""

from __future__ import annotations

from dataclasses import replace

from ftpipeline.worker.tls import SERVER_NAME, generate, problems


def test_issued_credentials_pass() -> None:
    assert problems(generate("p")) == []


def test_a_certificate_for_another_name_is_named() -> None:
    [found] = problems(generate("p", names=("worker.example.com",)))
    assert "worker.example.com" in found and SERVER_NAME in found


def test_a_certificate_of_another_ca_and_a_foreign_key_are_named() -> None:
    mine, theirs = generate("a"), generate("b")
    assert problems(replace(mine, ca=theirs.ca)) == ["tls.crt is not signed by ca.crt"]
    assert problems(replace(mine, key=theirs.key)) == ["tls.key is not the key of tls.crt"]


def test_garbage_is_named_not_raised() -> None:
    [found] = problems(replace(generate("p"), cert=b"not a certificate"))
    assert "not PEM" in found
