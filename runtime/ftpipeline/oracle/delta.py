"""The oracle's reading of a Delta table: the rows of steps 1..N, from the table's log, without a Delta library.

The run commits through delta-rs (``barrier/delta.py``); the oracle must not
trust the code it checks, so it reads the table as the Delta protocol
defines it: the log's entries ``_delta_log/<version>.json`` in order, each
a line per action, the data files live after them those added (``add``) and
not removed (``remove``), partition columns taken from each file's
``partitionValues``. It stops before the first entry whose application
transaction (``txn``) for this pipeline's sink is above N, so later steps
are not part of the comparison. A table's rows carry no step, so the
comparison is of steps 1..N as one multiset: each row once, none missing,
none extra. Partition values come back as text (the comparison casts every
column to the expected type).

It reads the log from its first entry: a table whose early entries were
cleaned up (after a checkpoint, past the log's retention) is refused with
a message saying so.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.lineage.naming import store_user
from ftpipeline.objectstore.base import ObjectStore, open_store
from ftpipeline.spec.model import PipelineSpec, StageSpec

_ENTRY = re.compile(r"^_delta_log/(\d{20})\.json$")


def log_entries(store: ObjectStore) -> list[tuple[int, list[dict[str, Any]]]]:
    """Every entry of the table's log, in order: (version, its actions)."""
    versions = sorted(int(m.group(1)) for k in store.list("_delta_log/") if (m := _ENTRY.match(k)))
    if versions and versions[0] != 0:
        raise RuntimeError(f"{store.uri}: the log starts at version {versions[0]} (older entries cleaned up); "
                           f"the oracle reads a Delta log from its first entry")
    return [(v, [json.loads(line) for line in store.get(f"_delta_log/{v:020d}.json").decode().splitlines()
                 if line.strip()]) for v in versions]


def _read(store: ObjectStore, add: dict[str, Any]) -> pa.Table:
    key = unquote(add["path"])
    local = store.local_path(key)
    table = pq.read_table(local if local is not None else io.BytesIO(store.get(key)))
    for column, value in (add.get("partitionValues") or {}).items():
        table = table.append_column(column, pa.array([value] * table.num_rows, pa.string()))
    return table


def table_at(store: ObjectStore, version: int) -> pa.Table:
    """The table's rows at ``version``, from its log (a lookup stage's table, ``dataflow/lookup.py``)."""
    live: dict[str, dict[str, Any]] = {}
    for v, actions in log_entries(store):
        if v > version:
            break
        for action in actions:
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    tables = [_read(store, add) for add in live.values()]
    return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})


def released_table(spec: PipelineSpec, stage: StageSpec, steps: int) -> pa.Table | None:
    """The table's rows as of step ``steps`` (None: no table, or none of these steps in it)."""
    assert stage.delta_sink is not None
    app_id = f"{store_user(spec.store_key)}-{stage.name}"  # as the barrier names its transactions
    store = open_store(stage.delta_sink.path)
    live: dict[str, dict[str, Any]] = {}
    applied = False
    for _, actions in log_entries(store):
        txn = [int(a["txn"]["version"]) for a in actions if "txn" in a and a["txn"].get("appId") == app_id]
        if txn and max(txn) > steps:
            break
        applied = True
        for action in actions:
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    if not applied:
        return None
    tables = [_read(store, add) for add in live.values()]
    return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
