"""A failed task names the stage whose function raised, the exception and the user's own line."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ftpipeline.obs.errors import one_line
from ftpipeline.spec.model import StageKind, StageSpec
from ftpipeline.worker.user_errors import describe, frames_of

CODE = '''\
def helper(x):
    raise KeyError(x)


def clean(df):
    def parse(value):
        if value < 0:
            raise ValueError(f"negative amount {value}")
        return value
    return parse(df)


def enrich(df):
    return helper(df)
'''


class PythonException(Exception):
    """What PySpark raises for an error in its Python worker (the same name and text shape)."""


@pytest.fixture
def module(tmp_path: Path) -> ModuleType:
    path = tmp_path / "code" / "orders.py"
    path.parent.mkdir()
    path.write_text(CODE)
    spec = importlib.util.spec_from_file_location("orders_under_test", path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    sys.modules.pop("orders_under_test", None)
    return loaded


def chain() -> tuple[StageSpec, ...]:
    return (StageSpec("orders", StageKind.SOURCE, 2), StageSpec("clean", StageKind.TRANSFORM, 2, function="clean"),
            StageSpec("enrich", StageKind.TRANSFORM, 2, function="enrich"))


def _worker_text(file: str) -> str:
    return ("An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
            '  File "/usr/lib/python3/dist-packages/pyspark/worker.py", line 1900, in main\n'
            "    process()\n"
            f'  File "{file}", line 8, in parse\n'
            '    raise ValueError(f"negative amount {value}")\n'
            "ValueError: negative amount -3\n")


def test_a_udf_error_from_sparks_python_worker_names_the_stage_the_exception_and_the_line(module: ModuleType) -> None:
    code = Path(str(module.__file__))
    exc = PythonException(_worker_text(str(code)))
    error = describe(exc, chain(), module, code.parent)
    assert error is not None
    assert (error.stage, error.function, error.type, error.message) == ("clean", "clean", "ValueError",
                                                                         "negative amount -3")
    assert (Path(error.file), error.line, error.in_function) == (code, 8, "parse")
    assert str(error) == "stage 'clean' (function clean) raised ValueError: negative amount -3 at orders.py:8 in parse"
    assert one_line(exc) == "ValueError: negative amount -3"  # not the header "An exception was thrown ..."


def test_an_error_raised_in_the_driver_names_the_chain_member_not_the_chains_first_stage(module: ModuleType) -> None:
    code = Path(str(module.__file__))
    with pytest.raises(KeyError) as raised:
        module.enrich("sku-1")
    error = describe(raised.value, chain(), module, code.parent)
    assert error is not None
    assert (error.stage, error.type, error.line, error.in_function) == ("enrich", "KeyError", 2, "helper")
    frames, _, _ = frames_of(raised.value)
    assert [f.function for f in frames][-2:] == ["enrich", "helper"]


def test_an_error_outside_the_users_code_is_not_theirs(module: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError) as raised:
        _ = 1 / 0
    assert describe(raised.value, chain(), module, Path(str(module.__file__)).parent) is None
    elsewhere = PythonException(_worker_text("/opt/somewhere/else.py"))
    assert describe(elsewhere, chain(), module, Path(str(module.__file__)).parent) is None


def test_an_error_inside_the_runtime_is_not_the_users_even_where_the_pipeline_sits_above_it(
        module: ModuleType) -> None:
    """A pipeline kept in a checkout of ftpipeline: its entry point's directory holds the runtime's files too,
    and an error raised in those is the runtime's (no user line to blame), not the pipeline's code."""
    import ftpipeline.worker.user_errors as mine

    try:
        mine.frames_of(None)  # type: ignore[arg-type]  # raises inside the runtime
    except Exception as exc:
        raised = exc
    above = Path(mine.__file__).resolve().parents[2]  # a directory that holds the ftpipeline package
    assert describe(raised, chain(), module, above) is None
