"""The file source: files dealt to channels in name order, offsets across files, dead letters, index cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ftpipeline.dataflow.sources import files as files_module
from ftpipeline.dataflow.sources.files import FileSourceReader
from ftpipeline.spec.model import FileSource

SCHEMA = (("id", "long"), ("name", "string"), ("amount", "double"), ("ok", "boolean"))


def source(path: Path, fmt: str = "jsonl", schema=SCHEMA, follow: bool = False) -> FileSource:
    return FileSource(path=path, format=fmt, rows_per_step=10, schema=schema, follow=follow)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def names_in_channel(channel: int, parallelism: int, count: int, suffix: str = ".jsonl") -> list[str]:
    """Names that land in ``channel`` when ``count`` files of every channel are written (dealt in name order)."""
    return [f"part-{k * parallelism + channel:04d}{suffix}" for k in range(count)]


def ids(table: pa.Table) -> list[int]:
    return table.column("id").to_pylist()


# -- layout --------------------------------------------------------------------


def test_files_are_dealt_to_the_channels_in_name_order_each_once(tmp_path: Path) -> None:
    names = [f"events-{i}.jsonl" for i in range(25)] + ["x.json"]
    for name in names:
        write_jsonl(tmp_path / name, [{"id": 1}])
    for ignored in [".hidden.jsonl", "_tmp.jsonl", "notes.txt", "data.csv"]:
        (tmp_path / ignored).write_text('{"id": 1}\n')
    (tmp_path / "sub.jsonl").mkdir()

    reader = FileSourceReader(source(tmp_path), parallelism=4)
    seen: list[str] = []
    for channel in range(4):
        channel_files = reader.files(channel)
        assert [p.name for p in channel_files] == sorted(p.name for p in channel_files)
        everything = sorted(names)
        assert [p.name for p in channel_files] == everything[channel::4]  # the i-th by name: channel i mod 4
        seen += [p.name for p in channel_files]
    assert sorted(seen) == sorted(names)
    # stable: a fresh reader (another process) agrees
    again = FileSourceReader(source(tmp_path), parallelism=4)
    assert all(again.files(c) == reader.files(c) for c in range(4))
    with pytest.raises(ValueError):
        reader.files(4)


def test_two_files_never_share_a_channel_while_another_has_none(tmp_path: Path) -> None:
    """Two files of the same hours (two regions, say) in a source of two channels: one each, whatever their names
    hash to (by a hash of the name both went to one channel, which read them one after the other, six hours and
    then the same six hours again, while the other channel read nothing)."""
    for name in ("east.jsonl", "west.jsonl"):
        write_jsonl(tmp_path / name, [{"id": 1}])
    reader = FileSourceReader(source(tmp_path), parallelism=2)
    assert [[p.name for p in reader.files(c)] for c in range(2)] == [["east.jsonl"], ["west.jsonl"]]
    assert [[p.name for p in FileSourceReader(source(tmp_path), parallelism=3).files(c)] for c in range(3)] == [
        ["east.jsonl"], ["west.jsonl"], []]


def test_offsets_run_across_files_in_name_order(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "b.jsonl", [{"id": i} for i in range(3, 5)])
    write_jsonl(tmp_path / "a.jsonl", [{"id": i} for i in range(0, 3)])
    write_jsonl(tmp_path / "c.jsonl", [{"id": i} for i in range(5, 9)])
    reader = FileSourceReader(source(tmp_path), parallelism=1)
    assert reader.available(0, 0) == 9
    assert reader.available(0, 4) == 5
    assert reader.available(0, 12) == 0
    assert ids(reader.read(0, 1, 0, 9).table) == list(range(9))
    assert ids(reader.read(0, 2, 2, 7).table) == [2, 3, 4, 5, 6]
    assert ids(reader.read(0, 3, 3, 5).table) == [3, 4]
    with pytest.raises(ValueError):
        reader.read(0, 4, 5, 10)


def test_channel_rows_follow_its_own_files(tmp_path: Path) -> None:
    for channel in range(2):
        for k, name in enumerate(names_in_channel(channel, 2, 3)):
            write_jsonl(tmp_path / name, [{"id": channel * 1000 + k * 10 + j} for j in range(k + 1)])
    reader = FileSourceReader(source(tmp_path), parallelism=2)
    for channel in range(2):
        assert reader.available(channel, 0) == 6
        expected = [channel * 1000 + k * 10 + j for k in range(3) for j in range(k + 1)]
        assert ids(reader.read(channel, 1, 0, 6).table) == expected


def test_same_range_twice_gives_equal_tables(tmp_path: Path) -> None:
    rows = [{"id": i, "name": f"n{i}", "amount": i / 2, "ok": i % 2 == 0} for i in range(20)]
    write_jsonl(tmp_path / "a.jsonl", rows[:7])
    write_jsonl(tmp_path / "b.jsonl", rows[7:])
    reader = FileSourceReader(source(tmp_path), parallelism=1)
    first = reader.read(0, 5, 4, 15)
    second = reader.read(0, 5, 4, 15)
    other = FileSourceReader(source(tmp_path), parallelism=1).read(0, 9, 4, 15)
    assert first.table.equals(second.table) and first.table.equals(other.table)
    assert first.table.to_pylist() == rows[4:15]
    assert first.table.schema == pa.schema(
        [("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64()), ("ok", pa.bool_())]
    )


# -- jsonl -----------------------------------------------------------------------


def test_jsonl_malformed_lines_become_dead_letters(tmp_path: Path) -> None:
    lines = [
        '{"id": 1, "name": "a", "amount": 1, "ok": true, "extra": [1]}',   # line 1, offset 0
        "",                                                                 # blank: no offset
        "{not json",                                                        # line 3, offset 1
        '{"id": "abc"}',                                                    # line 4, offset 2
        "[1, 2]",                                                           # line 5, offset 3
        '{"id": 3.0, "name": null}',                                        # line 6, offset 4
        '{"id": 3.5}',                                                      # line 7, offset 5
        '{"id": true}',                                                     # line 8, offset 6
        '{"ok": "yes"}',                                                    # line 9, offset 7
        '{"name": 5}',                                                      # line 10, offset 8
        '{"amount": false}',                                                # line 11, offset 9
        "   ",                                                              # blank: no offset
        '{"id": 7, "amount": 2.5, "ok": false}',                           # line 13, offset 10
    ]
    path = tmp_path / "a.jsonl"
    path.write_text("\n".join(lines) + "\n")
    reader = FileSourceReader(source(tmp_path), parallelism=1)
    assert reader.available(0, 0) == 11

    batch = reader.read(0, 1, 0, 11)
    assert batch.table.to_pylist() == [
        {"id": 1, "name": "a", "amount": 1.0, "ok": True},
        {"id": 3, "name": None, "amount": None, "ok": None},
        {"id": 7, "name": None, "amount": 2.5, "ok": False},
    ]
    by_line = {d.location: d for d in batch.dead_letters}
    assert list(by_line) == [f"{path}:{n}" for n in (3, 4, 5, 7, 8, 9, 10, 11)]
    assert by_line[f"{path}:3"].record == "{not json"
    assert by_line[f"{path}:3"].reason.startswith("not valid JSON")
    assert by_line[f"{path}:4"].reason == "field 'id': expected long, got 'abc'"
    assert by_line[f"{path}:4"].record == '{"id": "abc"}'
    assert "not a JSON object" in by_line[f"{path}:5"].reason
    assert by_line[f"{path}:7"].reason == "field 'id': expected long, got 3.5"
    assert by_line[f"{path}:8"].reason == "field 'id': expected long, got true"
    assert "field 'ok'" in by_line[f"{path}:9"].reason
    assert "field 'name'" in by_line[f"{path}:10"].reason
    assert "field 'amount'" in by_line[f"{path}:11"].reason

    # offsets still count the malformed records: offset 2 is line 4, offset 4 is line 6
    part = reader.read(0, 2, 2, 5)
    assert [d.location for d in part.dead_letters] == [f"{path}:4", f"{path}:5"]
    assert ids(part.table) == [3]


# -- csv -------------------------------------------------------------------------


def test_csv_quoting_short_records_and_bad_values(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text(
        "ok,id,ignored,name,amount\n"            # line 1: header, columns in another order
        'TRUE,1,x,"Smith, J",2.5\n'              # line 2, offset 0
        "false,2,x,\n"                           # line 3, offset 1: short record
        "\n"                                     # blank: no offset
        "true,abc,x,bob,1\n"                     # line 5, offset 2: bad long
        ',3,x,"multi\nline",\n'                  # line 6-7, offset 3: empty -> null, name keeps newline
        "False,4,x,,1e3\n"                       # line 8, offset 4: empty string stays ""
        "yes,5,x,eve,1\n"                        # line 9, offset 5: bad boolean
        "true,6,x,amy,1.5.2\n"                   # line 10, offset 6: bad double
    )
    reader = FileSourceReader(source(tmp_path, "csv"), parallelism=1)
    assert reader.available(0, 0) == 7
    batch = reader.read(0, 1, 0, 7)
    assert batch.table.to_pylist() == [
        {"id": 1, "name": "Smith, J", "amount": 2.5, "ok": True},
        {"id": 3, "name": "multi\nline", "amount": None, "ok": None},
        {"id": 4, "name": "", "amount": 1000.0, "ok": False},
    ]
    assert [(d.location, d.record) for d in batch.dead_letters] == [
        (f"{path}:3", "false,2,x,"),
        (f"{path}:5", "true,abc,x,bob,1"),
        (f"{path}:9", "yes,5,x,eve,1"),
        (f"{path}:10", "true,6,x,amy,1.5.2"),
    ]
    reasons = [d.reason for d in batch.dead_letters]
    assert "expected 5 fields" in reasons[0]
    assert reasons[1] == "field 'id': expected long, got 'abc'"
    assert "field 'ok'" in reasons[2] and "field 'amount'" in reasons[3]
    # a range starting inside the file, at the multi-line record
    assert reader.read(0, 2, 3, 5).table.column("name").to_pylist() == ["multi\nline", ""]


def test_csv_missing_schema_column_dead_letters_every_record(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("id,name,ok\n1,a,true\n2,b,false\n")
    reader = FileSourceReader(source(tmp_path, "csv"), parallelism=1)
    batch = reader.read(0, 1, 0, 2)
    assert batch.table.num_rows == 0
    assert [d.location for d in batch.dead_letters] == [f"{path}:2", f"{path}:3"]
    assert all("'amount'" in d.reason for d in batch.dead_letters)


# -- parquet ---------------------------------------------------------------------


def write_parquet(path: Path, start: int, count: int, row_group_size: int = 3) -> None:
    table = pa.table({
        "id": pa.array(range(start, start + count), type=pa.int32()),
        "name": [f"n{i}" for i in range(start, start + count)],
        "other": [1.0] * count,
    })
    pq.write_table(table, path, row_group_size=row_group_size)


def test_parquet_ranges_span_row_groups_and_files(tmp_path: Path) -> None:
    write_parquet(tmp_path / "a.parquet", 0, 10)    # groups 3,3,3,1
    write_parquet(tmp_path / "b.parquet", 10, 8)    # groups 3,3,2
    assert pq.ParquetFile(tmp_path / "a.parquet").metadata.num_row_groups == 4
    reader = FileSourceReader(source(tmp_path, "parquet", (("id", "long"), ("name", "string"))), 1)
    assert reader.available(0, 0) == 18
    for lo, hi in [(0, 18), (2, 7), (4, 5), (8, 13), (9, 10), (10, 11), (16, 18), (1, 17)]:
        table = reader.read(0, 1, lo, hi).table
        assert ids(table) == list(range(lo, hi)), (lo, hi)
        assert table.column("name").to_pylist() == [f"n{i}" for i in range(lo, hi)]
        assert table.schema == pa.schema([("id", pa.int64()), ("name", pa.string())])
    assert reader.read(0, 1, 5, 5).table.schema == pa.schema([("id", pa.int64()), ("name", pa.string())])


def test_parquet_without_schema_uses_the_files_own(tmp_path: Path) -> None:
    write_parquet(tmp_path / "a.parquet", 0, 5)
    reader = FileSourceReader(source(tmp_path, "parquet", ()), parallelism=1)
    table = reader.read(0, 1, 1, 4).table
    assert table.column_names == ["id", "name", "other"]
    assert table.schema.field("id").type == pa.int32()
    assert ids(table) == [1, 2, 3]
    assert reader.read(0, 1, 0, 0).table.column_names == ["id", "name", "other"]


def test_parquet_missing_schema_column_is_an_error(tmp_path: Path) -> None:
    write_parquet(tmp_path / "a.parquet", 0, 5)
    reader = FileSourceReader(source(tmp_path, "parquet", (("id", "long"), ("amount", "double"))), 1)
    with pytest.raises(ValueError, match=r"a\.parquet.*'amount'"):
        reader.read(0, 1, 0, 2)


# -- follow / exhausted ------------------------------------------------------------


def test_exhausted_only_without_follow(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"id": i} for i in range(3)])
    bounded = FileSourceReader(source(tmp_path), parallelism=1)
    assert not bounded.exhausted(0, 2)
    assert bounded.exhausted(0, 3)

    following = FileSourceReader(source(tmp_path, follow=True), parallelism=1)
    assert not following.exhausted(0, 3)
    assert following.available(0, 3) == 0
    write_jsonl(tmp_path / "b.jsonl", [{"id": i} for i in range(3, 5)])
    assert following.available(0, 3) == 2
    assert ids(following.read(0, 2, 3, 5).table) == [3, 4]
    assert not following.exhausted(0, 5)

    # a new file sorting before one already served would shift offsets: refused
    write_jsonl(tmp_path / "0.jsonl", [{"id": -1}])
    with pytest.raises(ValueError, match="changed"):
        following.available(0, 0)


def test_follow_on_a_missing_directory_waits(tmp_path: Path) -> None:
    reader = FileSourceReader(source(tmp_path / "later", follow=True), parallelism=2)
    assert reader.available(1, 0) == 0 and not reader.exhausted(1, 0)
    assert reader.read(1, 1, 0, 0).table.num_rows == 0


# -- the index cache -------------------------------------------------------------


def test_index_is_built_once_and_rebuilt_when_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds: list[Path] = []
    original = files_module._build_text_index

    def counting(path, fmt, stamp):
        builds.append(path)
        return original(path, fmt, stamp)

    monkeypatch.setattr(files_module, "_build_text_index", counting)
    path = tmp_path / "a.jsonl"
    write_jsonl(path, [{"id": i} for i in range(4)])
    write_jsonl(tmp_path / "b.jsonl", [{"id": 10}])
    reader = FileSourceReader(source(tmp_path), parallelism=1)
    for step in range(5):
        reader.available(0, step)
        reader.read(0, step, step, 5)
    assert sorted(p.name for p in builds) == ["a.jsonl", "b.jsonl"]

    stat = path.stat()
    write_jsonl(path, [{"id": i} for i in range(100, 106)])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert reader.available(0, 0) == 7
    assert ids(reader.read(0, 9, 0, 7).table) == [100, 101, 102, 103, 104, 105, 10]
    assert [p.name for p in builds].count("a.jsonl") == 2
    assert len(builds) == 3


# -- edges -----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_empty_range_has_the_schema(tmp_path: Path, fmt: str) -> None:
    if fmt == "jsonl":
        write_jsonl(tmp_path / "a.jsonl", [{"id": 1}])
    else:
        (tmp_path / "a.csv").write_text("id,name,amount,ok\n1,a,2,true\n")
    reader = FileSourceReader(source(tmp_path, fmt), parallelism=1)
    for lo in (0, 1):
        batch = reader.read(0, 1, lo, lo)
        assert batch.table.num_rows == 0 and batch.dead_letters == []
        assert batch.table.column_names == ["id", "name", "amount", "ok"]
        assert batch.table.schema.field("ok").type == pa.bool_()
    with pytest.raises(ValueError):
        reader.read(0, 1, 0, 2)
    with pytest.raises(ValueError):
        reader.read(0, 1, 1, 0)
