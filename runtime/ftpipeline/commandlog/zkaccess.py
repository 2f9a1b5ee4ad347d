"""Each pipeline's own ZooKeeper identity: its command log and checkpoints writable by it alone.

Every znode of a pipeline lives under ``/ftpipeline/<store key>``
(``zklog.base_path``). A shared ZooKeeper (the chart's) serves many
pipelines; without ACLs any client could rewrite another pipeline's command
log or committed checkpoint. So:

- the operator is ZooKeeper's super user (the server is started with its
  digest), which passes every ACL;
- ``/ftpipeline`` itself is readable by anyone and writable by nobody else,
  so no pipeline can create (or squat) another's path;
- each pipeline's base path, and every znode under it, carries one ACL: the
  pipeline's digest identity, all permissions. Its processes connect as that
  identity (``zkclient.connect`` with a ``digest://`` string), and kazoo gives
  what they create the same ACL.

A private ZooKeeper (``ftpipeline run`` with no address configured) serves
one pipeline: there ``grant(..., private=True)`` gives ``/`` and
``/ftpipeline`` the pipeline's ACL too, so a client without its credentials
can neither list nor create anything.

States of a pipeline's path, and what moves it:

    absent --grant--> owned by the pipeline --grant (next run)--> the same
    owned (with nodes from before ACLs) --grant--> every node re-owned
    owned --the deletion handler, as super--> absent

ZooKeeper lets anyone see that a path exists (``exists``, child names of a
readable parent); it is the data and the writes that the ACL withholds.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.security import ACL, READ_ACL_UNSAFE, make_digest_acl, make_digest_acl_credential

from ftpipeline.commandlog.zklog import ROOT, base_path
from ftpipeline.lineage.naming import store_user

SUPER_USER = "super"


def super_digest(password: str) -> str:
    """The ``-Dzookeeper.DigestAuthenticationProvider.superDigest`` value for ``password``."""
    return str(make_digest_acl_credential(SUPER_USER, password))


def pipeline_acl(store_key: str, password: str) -> list[ACL]:
    return [make_digest_acl(store_user(store_key), password, all=True)]


def grant(admin: KazooClient, store_key: str, password: str, private: bool = False) -> str:
    """Make the pipeline's path its own (creating it, and ``/ftpipeline`` read-only for others, if absent);
    ``admin`` is authenticated as the super user. ``private``: the server is the pipeline's alone, and the
    root and ``/ftpipeline`` are closed to everyone else. Returns the pipeline's user name."""
    acl = pipeline_acl(store_key, password)
    if private:
        admin.set_acls("/", acl)
    _own(admin, ROOT, acl if private else READ_ACL_UNSAFE)
    path = base_path(store_key)
    try:
        admin.create(path, b"", acl=acl)
    except NodeExistsError:
        _own_tree(admin, path, acl)
    return store_user(store_key)


def _own(admin: KazooClient, path: str, acl: list[ACL]) -> None:
    try:
        admin.create(path, b"", acl=acl)
    except NodeExistsError:
        admin.set_acls(path, acl)


def _own_tree(admin: KazooClient, path: str, acl: list[ACL]) -> None:
    """``acl`` on ``path`` and every znode under it (nodes written before, under another identity or none)."""
    admin.set_acls(path, acl)
    for child in admin.get_children(path):
        _own_tree(admin, f"{path}/{child}", acl)

