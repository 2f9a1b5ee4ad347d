"""A file source's directory is checked before the run starts: missing, not a directory, unreadable."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from ftpipeline.spec import parse_pipeline
from ftpipeline.spec.inputs import input_problems
from ftpipeline.spec.load import SpecError

DOC = """\
    apiVersion: ftpipeline.io/v1alpha1
    kind: FTPipeline
    metadata: {{name: files}}
    spec:
      entryPoint: m.py
      workers: 1
      stages:
        - name: orders
          source: {{file: {{path: {path}, format: jsonl, rowsPerStep: 10, follow: {follow},
                          schema: {{a: long}}}}}}
        - {{name: out, inputs: [{{stage: orders}}], sink: {{parquet: {{path: out}}}}}}
    """


def spec(tmp_path: Path, path: str, follow: bool = False) -> object:
    (tmp_path / "m.py").write_text("")
    return parse_pipeline(textwrap.dedent(DOC.format(path=path, follow=str(follow).lower())), tmp_path,
                          check_entry_point=False)


def test_a_missing_source_directory_fails_validation_naming_the_field_and_the_path(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("")
    with pytest.raises(SpecError) as err:
        parse_pipeline(textwrap.dedent(DOC.format(path="in", follow="false")), tmp_path)
    assert [str(p) for p in err.value.problems] == [
        f"spec.stages[0].source.file.path: {tmp_path / 'in'} does not exist"]


def test_a_file_a_follow_source_and_an_unreadable_directory(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    assert [p.message for p in input_problems(spec(tmp_path, "a-file"))] == [f"{tmp_path / 'a-file'} is not a directory"]  # type: ignore[arg-type]
    assert input_problems(spec(tmp_path, "later", follow=True)) == []  # type: ignore[arg-type]
    (tmp_path / "in").mkdir()
    assert input_problems(spec(tmp_path, "in")) == []  # type: ignore[arg-type]
    if os.getuid() != 0:  # root reads anything
        (tmp_path / "in").chmod(0)
        assert "cannot be read" in input_problems(spec(tmp_path, "in"))[0].message  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # PySpark's, on a UDF without pandas installed
def test_a_module_that_imports_only_with_spark_running_is_left_to_the_workers(tmp_path: Path) -> None:
    """``@udf("long")`` at module level needs a Spark session at import; validate has none (workers import it
    after theirs starts, and check it then), so it is no problem here. Any other import error still is."""
    (tmp_path / "in").mkdir()
    (tmp_path / "m.py").write_text(textwrap.dedent("""\
        from pyspark.sql import functions as F

        @F.udf("long")
        def doubled(x):
            return 2 * x
        """))
    parse_pipeline(textwrap.dedent(DOC.format(path="in", follow="false")), tmp_path)
    (tmp_path / "m2.py").write_text("raise RuntimeError('broken at import')\n")
    with pytest.raises(SpecError, match="spec.entryPoint: cannot import 'm2.py': RuntimeError: broken at import"):
        parse_pipeline(textwrap.dedent(DOC.format(path="in", follow="false")).replace("m.py", "m2.py"), tmp_path)
