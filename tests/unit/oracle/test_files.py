"""The oracle's own file reading agrees with hand-computed rows and with the runtime's reader.

Two implementations of one documented contract: where they disagree, one of
them has a bug that the other would otherwise have hidden from ``verify``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ftpipeline.dataflow.sources.base import channel_share
from ftpipeline.dataflow.sources.files import FileSourceReader
from ftpipeline.oracle.files import STEP, Letter, read_file_stage
from ftpipeline.spec.model import FileSource, StageKind, StageSpec

SCHEMA = (("id", "long"), ("name", "string"), ("amount", "double"), ("ok", "boolean"))


def stage(path: Path, fmt: str, rows_per_step: int = 3, parallelism: int = 2, schema=SCHEMA) -> StageSpec:
    return StageSpec("in", StageKind.SOURCE, parallelism,
                     file=FileSource(path=path, format=fmt, rows_per_step=rows_per_step, schema=schema))


def _jsonl(tmp_path: Path) -> None:
    for f in range(5):
        lines = []
        for i in range(9):
            n = f * 100 + i
            if i == 2:
                lines.append("{not json")
            elif i == 5:
                lines.append(json.dumps({"id": "seven", "name": "x"}))
            elif i == 6:
                lines.append("")  # blank: not a record
            elif i == 7:
                lines.append(json.dumps({"id": float(n), "name": None, "amount": n, "ok": True}))
            else:
                lines.append(json.dumps({"id": n, "name": f"n{n}", "amount": n / 3, "extra": [1]}))
        (tmp_path / f"part-{f}.jsonl").write_text("\r\n".join(lines) + "\n")


def _csv(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text('\ufeffid,name,amount,ok\n1,"multi\nline",1.5,TRUE\n\n2,b,x,false\n3,,,\n4,d\n')
    (tmp_path / "b.csv").write_text("name,id,ok,amount\nz,10,true,2\nq,1_0,false,1\n")
    (tmp_path / "c.csv").write_text("id,name\n5,only-two-columns\n")


def _runtime(st: StageSpec, steps: int) -> tuple[pa.Table, list[Letter]]:
    assert st.file is not None
    reader = FileSourceReader(st.file, st.parallelism)
    tables, letters = [], []
    for ch in range(st.parallelism):
        share = channel_share(st.file.rows_per_step, st.parallelism, ch)
        total = reader.available(ch, 0) or 0
        for step in range(1, steps + 1):
            lo, hi = (step - 1) * share, min(step * share, total)
            if hi <= lo:
                break
            batch = reader.read(ch, step, lo, hi)
            tables.append(batch.table.append_column(STEP, pa.array([step] * batch.table.num_rows, pa.int32())))
            letters += [Letter(st.name, step, d.location, d.record) for d in batch.dead_letters]
    return pa.concat_tables(tables), letters


def _rows(table: pa.Table) -> list[tuple[object, ...]]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_the_oracle_reads_what_the_runtime_reads(tmp_path: Path, fmt: str) -> None:
    (_jsonl if fmt == "jsonl" else _csv)(tmp_path)
    st = stage(tmp_path, fmt)
    for steps in (1, 4, 50):
        rows, letters = read_file_stage(st, steps)
        runtime_rows, runtime_letters = _runtime(st, steps)
        assert _rows(rows) == _rows(runtime_rows)
        assert sorted(letters, key=repr) == sorted(runtime_letters, key=repr)


def test_jsonl_by_hand(tmp_path: Path) -> None:
    _jsonl(tmp_path)
    rows, letters = read_file_stage(stage(tmp_path, "jsonl", rows_per_step=1000, parallelism=1), 1)
    assert rows.num_rows == 5 * 6  # 9 lines a file: one malformed JSON, one wrong type, one blank
    assert len(letters) == 10
    first = tmp_path / "part-0.jsonl"
    assert Letter("in", 1, f"{first}:3", "{not json") in letters
    assert Letter("in", 1, f"{first}:6", '{"id": "seven", "name": "x"}') in letters
    integral = [r for r in rows.to_pylist() if r["id"] == 7]
    assert integral == [{"id": 7, "name": None, "amount": 7.0, "ok": True, STEP: 1}]


def test_csv_by_hand(tmp_path: Path) -> None:
    _csv(tmp_path)
    rows, letters = read_file_stage(stage(tmp_path, "csv", rows_per_step=1000, parallelism=1), 1)
    assert _rows(rows) == sorted([(1, "multi\nline", 1.5, True, 1), (3, "", None, None, 1), (10, "z", 2.0, True, 1)])
    assert sorted((Path(x.location).name, x.record) for x in letters) == [
        ("a.csv:5", "2,b,x,false"), ("a.csv:7", "4,d"), ("b.csv:3", "q,1_0,false,1"), ("c.csv:2", "5,only-two-columns")]


def test_parquet_rows_and_steps(tmp_path: Path) -> None:
    for f in range(3):
        pq.write_table(pa.table({"id": list(range(f * 10, f * 10 + 7)), "name": ["x"] * 7}), tmp_path / f"p{f}.parquet",
                       row_group_size=3)
    st = stage(tmp_path, "parquet", rows_per_step=4, schema=(("id", "long"),))
    for steps in (1, 2, 30):
        rows, letters = read_file_stage(st, steps)
        assert _rows(rows) == _rows(_runtime(st, steps)[0]) and letters == []
    assert read_file_stage(st, 30)[0].num_rows == 21
