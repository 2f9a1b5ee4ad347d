"""Bundles: one file per task, each object still read, served and collected on its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from ftpipeline.worker.buffer import WHOLE, ObjectBuffer, read_ipc


def _buffer(tmp_path: Path) -> ObjectBuffer:
    b = ObjectBuffer(tmp_path)
    b.reset()
    return b


def _rows(*xs: int) -> pa.Table:
    return pa.table({"x": pa.array(xs, pa.int64())})


def test_a_task_writes_one_file_and_each_object_reads_back_alone(tmp_path: Path) -> None:
    b = _buffer(tmp_path)
    everything = _rows(1, 2, 3)
    objects = {"a.0.1.b.1.0": _rows(1), "a.0.1.b.1.1": _rows(), "a.0.1.b.1.2": _rows(2, 3),
               "a.0.1.sink.0.0": everything, "a.0.1.other.0.0": everything}
    outputs = b.put_bundle("a.0.1.0", objects)
    assert [p.name for p in b.objects.iterdir()] == ["a.0.1.0.arrow"], "a P x C edge costs one file per producer"
    assert [o[:2] for o in outputs] == [[n, t.num_rows] for n, t in objects.items()]
    b.index(outputs)
    for name, table in objects.items():
        got = b.read(name)
        assert got is not None and got.equals(table, check_metadata=True), name
    where = {name: b.locate(name) for name in objects}
    assert where["a.0.1.sink.0.0"] == where["a.0.1.other.0.0"], "the same rows twice are one batch"
    assert b.held() == 5


def test_the_file_goes_when_its_last_object_is_collected(tmp_path: Path) -> None:
    b = _buffer(tmp_path)
    b.index(b.put_bundle("a.0.1.0", {"x.1": _rows(1), "x.2": _rows(2)}))
    b.drop("x.1")
    assert (b.objects / "a.0.1.0.arrow").exists() and b.read("x.1") is None
    assert b.read("x.2") == _rows(2)
    b.drop("x.2")
    b.drop("x.2")  # twice: nothing left to do
    assert list(b.objects.iterdir()) == [] and b.held() == 0


def test_a_task_run_twice_here_keeps_the_first_copy_and_leaves_no_file_behind(tmp_path: Path) -> None:
    b = _buffer(tmp_path)
    b.index(b.put_bundle("a.0.1.0", {"x.1": _rows(1)}))
    again = b.put_bundle("a.0.1.0", {"x.1": _rows(1)})
    assert again[0][2] == "a.0.1.0.1.arrow", "never overwrites an indexed file"
    b.index(again)
    assert b.locate("x.1") == (b.objects / "a.0.1.0.arrow", 0)
    assert sorted(p.name for p in b.objects.iterdir()) == ["a.0.1.0.arrow"]


def test_a_refused_completion_takes_only_its_own_objects_away(tmp_path: Path) -> None:
    b = _buffer(tmp_path)
    b.index(b.put_bundle("a.0.1.0", {"x.1": _rows(1)}))
    refused = b.put_bundle("a.0.2.0", {"x.2": _rows(2), "x.1": _rows(1)})
    b.index(refused)
    b.unindex(refused)
    assert b.read("x.2") is None and b.read("x.1") == _rows(1)
    assert sorted(p.name for p in b.objects.iterdir()) == ["a.0.1.0.arrow"]


def test_objects_of_two_schemas_go_to_two_files(tmp_path: Path) -> None:
    b = _buffer(tmp_path)
    outputs = b.put_bundle("a.0.1.0", {"x.1": _rows(1), "y.1": pa.table({"y": ["s"]})})
    b.index(outputs)
    assert len({o[2] for o in outputs}) == 2
    assert b.read("y.1") == pa.table({"y": ["s"]}) and b.read("x.1") == _rows(1)


def test_a_whole_file_reads_as_it_was_written(tmp_path: Path) -> None:
    b = _buffer(tmp_path)
    b.index(b.put_bundle("a.0.1.0", {"x.1": _rows(1, 2)}))
    path, batch = b.locate("x.1") or (Path(), 0)
    assert read_ipc(path, batch) == _rows(1, 2) and read_ipc(path, WHOLE).num_rows == 2


def _pieces(*pieces: dict[str, pa.Table]) -> list[dict[str, pa.Table]]:
    return list(pieces)


def test_a_large_task_writes_each_object_a_piece_at_a_time_into_a_file_of_its_own(tmp_path: Path) -> None:
    b = _buffer(tmp_path)
    first, second = _rows(1, 2), _rows(3)
    pieces = _pieces({"a.0.1.b.1.0": _rows(1), "a.0.1.b.1.1": _rows(2), "a.0.1.sink.0.0": first, "a.0.1.c.0.0": first},
                     {"a.0.1.b.1.0": _rows(), "a.0.1.b.1.1": _rows(3), "a.0.1.sink.0.0": second, "a.0.1.c.0.0": second})
    outputs = b.put_streamed("a.0.1.0", iter(pieces))
    assert {o[0]: o[1] for o in outputs} == {"a.0.1.b.1.0": 1, "a.0.1.b.1.1": 2, "a.0.1.sink.0.0": 3, "a.0.1.c.0.0": 3}
    assert all(o[3] == WHOLE for o in outputs)
    b.index(outputs)
    assert b.read("a.0.1.b.1.1") == _rows(2, 3)
    assert b.read("a.0.1.c.0.0") == _rows(1, 2, 3) == b.read("a.0.1.sink.0.0")
    shared = [b.objects / str(o[2]) for o in outputs if o[0] in ("a.0.1.sink.0.0", "a.0.1.c.0.0")]
    assert shared[0] != shared[1] and shared[0].stat().st_ino == shared[1].stat().st_ino, "the same rows: one file, two names"
    assert not [p for p in b.objects.iterdir() if p.name.startswith(".")], "no temporary file is left"
    b.drop("a.0.1.sink.0.0")
    assert b.read("a.0.1.c.0.0") == _rows(1, 2, 3), "each name is collected on its own"
    b.drop("a.0.1.c.0.0")
    assert sorted(p.name for p in b.objects.iterdir()) == ["a.0.1.0.o0.arrow", "a.0.1.0.o1.arrow"]


def test_a_large_task_run_again_keeps_its_first_files_and_a_failed_one_leaves_nothing(tmp_path: Path) -> None:
    b = _buffer(tmp_path)
    first = b.put_streamed("a.0.1.0", iter(_pieces({"a.0.1.b.0.0": _rows(1)})))
    b.index(first)
    again = b.put_streamed("a.0.1.0", iter(_pieces({"a.0.1.b.0.0": _rows(1)})))
    assert again[0][2] != first[0][2], "a re-run never overwrites an indexed file"

    def failing() -> Iterator[dict[str, pa.Table]]:
        yield {"a.0.2.b.0.0": _rows(1)}
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        b.put_streamed("a.0.2.0", failing())
    assert not [p for p in b.objects.iterdir() if "a.0.2" in p.name], "a failed task leaves no file"
    assert b.put_streamed("a.0.3.0", iter([{}])) == [], "nothing wanted: nothing written"
