"""A chain's Spark plan, built once and run on every step's rows, as Structured Streaming runs a query.

Why: a chained task turned its input Arrow table into a DataFrame, called
the chain's functions and brought the result back to Arrow, every step.
Measured on a warm worker for 25k rows through three small functions:
``createDataFrame`` 30 ms; the functions 50-65 ms, because every
``withColumn`` or ``filter`` is analysed on the spot, through py4j; and
``toArrow`` 130 ms, because Spark turns an Arrow relation into rows one by
one, where a Parquet scan is vectorised (60 ms). The JVM also kept JIT
compiling the analyser, step after step. Spark Structured Streaming pays
none of this per batch: its query's plan is analysed once, and each
micro-batch substitutes its own input relation into it.

How, the same here. A *program* (the chain's functions, then the hash
columns of its output edges, see ``dataflow/partition.py``) gets a
*template* per worker, chain and input schema:

- first task: write the rows as an uncompressed Parquet file into a scan
  directory of the template's own, read that directory with Spark, call the
  program once, keep the analysed plan and the directory's file index;
- every later task: replace the file with this task's rows, refresh the
  index, run a fresh query execution of the same analysed plan (optimised
  and planned again for these rows, as a micro-batch is).

Same task, 80 ms instead of 215.

States of a template: none -> built (first task of its schema) -> reused
(every later task); built -> per task when the program cached a DataFrame
(Spark's cache matches a scan by its directory, so it would hand later tasks
the first task's rows), when the Spark internals this needs are missing, or
with ``reusePlans: false``. Per task, each task's rows get a directory of
their own. A program that raises leaves no template: the next task builds one.

So a chain's functions are called once per worker, chain and input schema,
not once per step: they must describe a transformation, as a Structured
Streaming query's do, and not act per call. A pipeline whose functions do
act per call sets ``spec.reusePlans: false``: every task then calls them,
still on a Parquet scan of its rows. Rows of a type this path is not proven
for (``scannable``) take ``createDataFrame`` and a call per task, so a result
never depends on which path ran.

The result comes back as an Arrow table (``toArrow``), or, for a task too
large to collect, is written by Spark itself (``run``'s ``finish``,
``dataflow/spill.py``).

Several tasks of one chain, one job (``run_many``). A worker that holds
several channels of a stage runs their tasks of a step one after another,
each a Spark job of its own: 50-80 ms of planning and scheduling each,
whatever its rows, which is what set the pace once a pipeline has more
channels than cores. When those tasks are ready together, their rows go
into one scan directory as one file per task, the program runs once, and
each output row is given back to its task by the file it was read from
(Spark's ``input_file_name``). That is exact only where every row of the
output comes from one input row read in the same pass: the program's
optimised plan may hold only projections, filters and generators (explode)
over the scan. An aggregate, a join, a sort, a limit, a distinct, a window
or a Python UDF (whose rows are evaluated in batches, apart from the scan)
make the program *ungroupable*: its template remembers that, and its
tasks run one by one as before. Grouped templates are separate from
single ones; the same reuse rules apply to both.

No Spark job at all, where the plan allows (``arrow_plans.py``). When a
template is built, its program's optimised plan is also compiled to Arrow
compute calls, if every node and expression in it has a translation that
gives Spark's values; the first task's rows go through both, and the
compiled program is kept only if the tables are equal. Every later task
of the template then runs on Arrow compute, in milliseconds, unless its
rows need Spark's own answer (``Fallback``: an overflow, a division by
zero, a NaN compared), when that task takes the Spark job as before.
States of a template's compiled program: none (not compiled, not equal,
or not needed: a task written through files, ``reusePlans: false``) ->
kept; a task's ``Fallback`` leaves it kept for the next.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ftpipeline.dataflow.arrow_plans import ArrowProgram, NotNative, compile_plan
from ftpipeline.dataflow.frames import to_dataframe

log = logging.getLogger("ftpipeline.plans")

Program = Callable[[Any], Any]  # DataFrame -> DataFrame
R = TypeVar("R")
ROW_GROUP = 65_536  # rows the Parquet writer encodes at a time: a large step's input is never copied whole


def _to_arrow(df: Any) -> Any:
    return df.toArrow()


def _scannable(kind: pa.DataType) -> bool:
    """Types whose Parquet round trip gives Spark the column ``createDataFrame`` gives it
    (``tests/integration/dataflow/test_plan_paths.py`` checks each)."""
    if pa.types.is_timestamp(kind):
        return bool(kind.unit == "us" and kind.tz == "UTC")  # naive ones: createDataFrame reads them in UTC
    return any(check(kind) for check in (pa.types.is_signed_integer, pa.types.is_float32, pa.types.is_float64,
                                         pa.types.is_boolean, pa.types.is_string, pa.types.is_large_string,
                                         pa.types.is_date32))


def scannable(schema: pa.Schema) -> bool:
    return len(schema) > 0 and all(_scannable(f.type) for f in schema)


ROW_WISE = frozenset({"Project", "Filter", "Generate", "LogicalRelation"})  # plan nodes a grouped job may hold
_FILE = "__ftp_file"


@dataclass
class _Template:
    scan: Path           # the directory the plan's input relation lists (this template's own)
    plan: Any = None     # the analysed logical plan (JVM object); None: the program runs per task
    index: Any = None    # the input relation's file index (JVM object), refreshed per task
    files: list[Path] = field(default_factory=list)  # the task's rows (one file per task when grouped)
    native: ArrowProgram | None = None  # the plan on Arrow compute (arrow_plans.py), checked on the first task
    unchecked: Any = None  # built ahead of any task (``warm``): the program's DataFrame, its translation
                           # still to be checked on the first task's rows


class Plans:
    """Runs programs on Arrow tables in one SparkSession, reusing each program's plan where it may."""

    def __init__(self, spark: Any, scan_root: Path, reuse: bool = True) -> None:
        self.spark = spark
        self.scan_root = scan_root
        self.reuse = reuse
        self._templates: dict[tuple[str, pa.Schema], _Template] = {}
        self._files = 0
        self._made = 0
        self.jobs = 0  # programs run (Spark jobs), for the step breakdown (obs/phases.py)
        self.native = 0  # tasks whose program ran on Arrow compute instead
        shutil.rmtree(scan_root, ignore_errors=True)

    def run(self, key: str, program: Program, table: pa.Table, finish: Callable[[Any], R] = _to_arrow) -> R:
        """``finish`` (by default ``toArrow``) of ``program`` applied to ``table``'s rows."""
        if not scannable(table.schema):
            self.jobs += 1
            return finish(program(to_dataframe(self.spark, table)))
        slot = (key, table.schema)
        template = self._templates.get(slot)
        if template is not None and template.native is not None and finish is _to_arrow:
            outs = self._natively(key, template.native, [table])
            if outs is not None:
                return cast(R, outs[0])  # finish is _to_arrow: R is a table
        self.jobs += 1
        if template is not None and template.plan is not None:
            self._replace(template, table)
            result = finish(self._execute(template.plan))
            if template.unchecked is not None and finish is _to_arrow:  # built by ``warm``: now real rows
                template.native = self._checked(key, template.unchecked, [table], [cast(pa.Table, result)])
                template.unchecked = None
            return result
        if template is not None:
            return self._once(key, program, table, finish)
        template = self._new(key)
        df = self._scan(template, table)
        out = program(df)  # a user error leaves no template: the next task builds one again
        self._templates[slot] = template
        if self.reuse:
            self._keep(key, template, df, out)
        result = finish(out)
        if template.plan is not None and finish is _to_arrow:
            template.native = self._checked(key, out, [table], [result])
        return result

    def warm(self, key: str, program: Program, empty: pa.Table) -> bool:
        """Build ``program``'s plan for tables of ``empty``'s schema and run it once, before a task needs
        it: a stream's first records then wait for no analysis and no first job of that plan. Its Arrow
        translation is still checked against Spark on the first task's own rows. False when it cannot
        be warmed (plans not reused, a schema no scan takes, the program fails on no rows)."""
        slot = (key, empty.schema)
        if not self.reuse or not scannable(empty.schema) or slot in self._templates:
            return False
        template = self._new(key)
        try:
            df = self._scan(template, empty)
            out = program(df)
            self._keep(key, template, df, out)
            if template.plan is None:
                return False
            self.jobs += 1
            out.toArrow()
        except Exception as exc:  # the first task meets it again, and reports it as its own failure
            log.info("plan not warmed", extra={"program": key, "error": str(exc)[:200]})
            return False
        template.unchecked = out
        self._templates[slot] = template
        return True

    def run_many(self, key: str, program: Program, tables: list[pa.Table]) -> list[pa.Table] | None:
        """``program`` applied to each table's rows, in one Spark job; None when it cannot be (the
        program is not row-wise, the tables differ in schema or take no scan, plans are not reused):
        the caller then runs each on its own."""
        schema = tables[0].schema
        if not self.reuse or not scannable(schema) or any(t.schema != schema for t in tables[1:]):
            return None
        slot = (f"{key}#many", schema)
        template = self._templates.get(slot)
        single = self._templates.get((key, schema))
        if (template is None or template.native is None) and single is not None and single.native is not None:
            # a task of this program already ran on Arrow compute, checked against Spark: each table through
            # it is what running the tasks one by one gives (a worker handed a lost channel's tasks groups
            # them for the first time, and needs no Spark job and no check for that)
            natively = self._natively(key, single.native, tables)
            if natively is not None:
                return natively
        if template is None:
            template = self._new(f"{key}-many")
            names = self._write(template, tables)
            df = self._read(template, schema)
            plain = program(df)  # a user error leaves no template, as in ``run``
            self._templates[slot] = template
            if not row_wise(plain):
                log.info("tasks not grouped: the program is not row-wise", extra={"program": key})
                return None
            out = _tagged(plain)
            self._keep(key, template, df, out)
            if template.plan is None:
                return None
            self.jobs += 1
            outs = _by_file(out.toArrow(), names)
            template.native = self._checked(key, plain, tables, outs)
            return outs
        if template.plan is None:
            return None
        if template.native is not None:
            natively = self._natively(key, template.native, tables)
            if natively is not None:
                return natively
        names = self._write(template, tables)
        template.index.refresh()
        self.jobs += 1
        return _by_file(self._execute(template.plan).toArrow(), names)

    # --- the program on Arrow compute (arrow_plans.py) -----------------------------------------------

    def _checked(self, key: str, out: Any, tables: list[pa.Table], spark: list[pa.Table]) -> ArrowProgram | None:
        """``out``'s plan on Arrow compute, if it compiles and gives ``spark``'s tables (Spark's own
        results for ``tables``) exactly; None otherwise: the program keeps running in Spark."""
        try:
            native = compile_plan(out)
        except Exception as exc:  # NotNative; or a plan of a shape no translation expects: Spark is the reference
            reason = str(exc) if isinstance(exc, NotNative) else f"{type(exc).__name__}: {exc}"
            log.info("program runs in Spark", extra={"program": key, "reason": reason[:200]})
            return None
        native.schema = spark[0].schema
        try:
            same = all(native(t).equals(s) for t, s in zip(tables, spark))
        except Exception as exc:  # Fallback, an Arrow error, a column the scan lacks (a metadata column)
            log.info("program runs in Spark: its first rows need it", extra={"program": key, "reason": str(exc)[:200]})
            return None
        if not same:
            log.warning("program runs in Spark: Arrow compute gave other rows", extra={"program": key})
            return None
        log.info("program runs on Arrow compute", extra={"program": key})
        return native

    def _natively(self, key: str, native: ArrowProgram, tables: list[pa.Table]) -> list[pa.Table] | None:
        """Each table through ``native``; None when some rows need Spark's own answer (``Fallback``)."""
        try:
            outs = [native(t) for t in tables]
        except Exception as exc:  # Fallback, or anything else: Spark gives these rows its own answer
            log.info("rows run in Spark", extra={"program": key, "reason": str(exc)[:200]})
            return None
        self.native += len(tables)
        return outs

    def _once(self, key: str, program: Program, table: pa.Table, finish: Callable[[Any], R]) -> R:
        """The program called on this task's rows alone, in a directory of their own: Spark's cache
        matches a file scan by its directory, so a program that caches never meets an older task's."""
        once = self._new(key)
        try:
            return finish(program(self._scan(once, table)))
        finally:
            shutil.rmtree(once.scan, ignore_errors=True)

    # --- the scan directory: one file, this task's rows ------------------------------------------

    def _new(self, key: str) -> _Template:
        self._made += 1
        template = _Template(self.scan_root / f"{key}-{self._made}")
        template.scan.mkdir(parents=True, exist_ok=True)
        return template

    def _write(self, template: _Template, tables: list[pa.Table]) -> list[str]:
        """The tables as the scan's files (one each), replacing the previous task's; their names in order."""
        for old in template.files:
            old.unlink(missing_ok=True)
        template.files = []
        for table in tables:
            self._files += 1  # a new name per task: nothing Spark might keep by path sees stale rows
            path = template.scan / f"part-{self._files}.parquet"
            pq.write_table(table, path, compression="none", row_group_size=ROW_GROUP)
            template.files.append(path)
        return [p.name for p in template.files]

    def _read(self, template: _Template, schema: pa.Schema) -> Any:
        from pyspark.sql.pandas.types import from_arrow_schema

        return self.spark.read.schema(from_arrow_schema(schema)).parquet(str(template.scan))

    def _scan(self, template: _Template, table: pa.Table) -> Any:
        self._write(template, [table])
        return self._read(template, table.schema)

    def _replace(self, template: _Template, table: pa.Table) -> None:
        self._write(template, [table])
        template.index.refresh()

    # --- Spark internals (classic Spark 4) ---------------------------------------------------------

    def _keep(self, key: str, template: _Template, df: Any, out: Any) -> None:
        """Keep ``out``'s analysed plan and ``df``'s file index in ``template``, if reusing them is safe."""
        try:
            if not self.spark._jsparkSession.sharedState().cacheManager().isEmpty():
                log.warning("plan not reused: the program cached a DataFrame", extra={"program": key})
                return
            template.index = df._jdf.queryExecution().analyzed().relation().location()
            template.plan = out._jdf.queryExecution().analyzed()
        except Exception as exc:  # py4j: a Spark without these internals runs the program per task
            template.plan = template.index = None
            log.warning("plan not reused: Spark internals missing", extra={"program": key, "error": str(exc)[:200]})

    def _execute(self, plan: Any) -> Any:
        from pyspark.sql.classic.dataframe import DataFrame

        dataset = self.spark._jvm.org.apache.spark.sql.classic.Dataset.ofRows(self.spark._jsparkSession, plan)
        return DataFrame(dataset, self.spark)


def _nodes(plan: Any) -> list[str]:
    children = plan.children()
    return [str(plan.nodeName()), *(n for i in range(children.size()) for n in _nodes(children.apply(i)))]


def row_wise(df: Any) -> bool:
    """Does every output row of ``df`` come from one input row, in the pass that reads it (its optimised
    plan holds only projections, filters and generators over one scan)? Python UDFs are evaluated apart."""
    try:
        nodes = _nodes(df._jdf.queryExecution().optimizedPlan())
    except Exception:  # py4j: a Spark without these internals groups nothing
        return False
    return set(nodes) <= ROW_WISE and nodes.count("LogicalRelation") == 1


def _tagged(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.withColumn(_FILE, F.input_file_name())


def _by_file(result: pa.Table, names: list[str]) -> list[pa.Table]:
    """``result``'s rows per input file, in the order of ``names``, without the file column."""
    files = result.column(_FILE)
    payload = result.drop_columns([_FILE])
    out = [payload.filter(pc.ends_with(files, "/" + name)) for name in names]
    if sum(t.num_rows for t in out) != result.num_rows:  # row_wise let through a plan it should not have
        raise RuntimeError(f"grouped tasks: {result.num_rows} rows out, {sum(t.num_rows for t in out)} traced "
                           "to their input files")
    return out
