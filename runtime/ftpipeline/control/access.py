"""Each pipeline's own Redis user: isolation enforced by Redis, not only by key naming.

Every key of a pipeline starts with ``ftp:{<store key>}:`` (``lineage/tables.py``,
``control/store.py``). A shared Redis (the chart's) serves many pipelines, and
a worker runs user code next to its sidecar: if every pipeline held the same
password, a pipeline could read or wipe another's lineage. So whoever holds
the server's admin password (the operator) creates, for each pipeline, an ACL
user allowed that key pattern alone and no administrative command, with a
password of its own; the pipeline's processes connect as that user.

States of a pipeline's user, and what moves it:

    absent --grant--> active --grant (next run: same password)--> active
    active --revoke (pipeline deleted)--> absent

``grant`` is idempotent: it resets the user to exactly the rules below, so an
earlier, wider rule never survives. Users are written to the server's ACL
file (``ACL SAVE``) when it has one, so a restarted Redis keeps them; one
without an ACL file loses them with the rest of its data, and the next
``grant`` (the operator's next run of each pipeline) brings them back.

Pub/Sub channels follow the same pattern as keys (a completion is announced on
``ftp:{<store key>}:ready``, ``lineage/tables.py``). What a pipeline user may not
do: touch a key or a channel outside its pattern, run ``@admin`` or ``@dangerous`` commands (ACL, CONFIG, FLUSHALL,
KEYS, DEBUG, ...). It may run ``SCAN``, which lists key names (never values)
of other pipelines; key names carry a pipeline's namespace, name and uid.
"""

from __future__ import annotations

import secrets
from urllib.parse import quote, urlsplit, urlunsplit

import redis

from ftpipeline.lineage.naming import store_user

CATEGORIES = ("+@all", "-@admin", "-@dangerous")


def key_pattern(store_key: str) -> str:
    """The ACL key pattern of a pipeline: the hash-tagged prefix every one of its keys carries, with the
    pattern's special characters escaped (a store key may hold none, but a name is not trusted)."""
    escaped = "".join(f"\\{c}" if c in "*?[]\\" else c for c in store_key)
    return f"ftp:{{{escaped}}}:*"


def new_password() -> str:
    return secrets.token_urlsafe(32)


def grant(admin: redis.Redis, store_key: str, password: str) -> str:
    """Create or reset the pipeline's user with exactly its rules; returns the user name."""
    user = store_user(store_key)
    pattern = key_pattern(store_key)
    admin.acl_setuser(user, enabled=True, passwords=[f"+{password}"], keys=[pattern], channels=[pattern],
                      categories=list(CATEGORIES), reset=True, reset_keys=True, reset_channels=True)
    _save(admin)
    return user


def revoke(admin: redis.Redis, store_key: str) -> None:
    """Delete the pipeline's user (its open connections are closed by Redis)."""
    admin.acl_deluser(store_user(store_key))
    _save(admin)


def _save(admin: redis.Redis) -> None:
    try:
        admin.acl_save()
    except redis.ResponseError as exc:
        if "configured to use an ACL file" not in str(exc):  # a server without one keeps users in memory only
            raise


def with_credentials(url: str, user: str, password: str) -> str:
    """``url`` with these credentials in place of any it has (``user`` empty: the default user, the admin)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
