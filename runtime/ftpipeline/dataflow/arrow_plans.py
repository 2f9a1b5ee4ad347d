"""A row-wise Spark plan run on Arrow compute, without a Spark job, where that gives Spark's own rows.

Why: a transform's program on a step's rows costs a Spark job even with its
plan reused (``dataflow/plans.py``): the scan file written, the plan
optimised and planned again, tasks scheduled, the rows brought back. 70 ms
alone for 2,500 rows through three ``withColumn`` calls, 200-300 ms with two
workers on two cores, whatever the rows: on a chain with a shuffle before
every stage that cost, once per stage and worker and step, set the pace. The
same projections and filters over Arrow columns take a few milliseconds.
Engines that accelerate Spark (Photon, Gluten, Comet) do this on the
physical plan; this is the same idea on the optimised logical plan, for the
part a streaming transform mostly is.

What: Spark still analyses and optimises the user's functions; the
optimised plan is translated once per template, node by node, into Arrow
compute calls — only where the call gives what Spark gives, value for value:

- plan nodes: ``Project``, ``Filter`` over one file scan (``LogicalRelation``);
- expressions: columns, literals (boolean, integer, floating, string; a
  date or timestamp literal, which is how ``current_date()`` reaches the
  optimised plan, is refused: it is fixed per optimisation), aliases,
  widening casts (and a boolean to a number), ``+ - *`` (overflow raises in ANSI mode, wraps in
  legacy), ``/`` on doubles, ``floor``/``ceil``, unary minus, ``abs``,
  comparisons, ``<=>``, ``AND``/``OR``/``NOT`` (three-valued), ``IS [NOT]
  NULL``, ``isnan``, ``CASE WHEN``, ``IF``, ``COALESCE``, ``IN``, ``dropna``'s
  non-null count, ``upper``/``lower``, ``length``, ``concat``,
  ``startswith``/``endswith``/``contains`` with a literal.

Anything else (a Python UDF, a generator, a non-deterministic function, a
decimal, a time function) makes the program *not native*: it runs in Spark
as before. Where Spark's answer depends on the values — a division by zero
or an overflow (an error in ANSI mode), a NaN in a comparison (Spark orders
NaN above every number), a non-ASCII string in ``upper`` — the evaluation
gives up (``Fallback``) and that task runs in Spark, so errors and edge
values are Spark's own. ``plans.py`` also checks the first task of every
template both ways and keeps the native path only if the tables are equal;
``tests/integration/dataflow/test_arrow_plans.py`` compares each expression
with Spark on random tables.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger("ftpipeline.arrow_plans")

Values = Any  # pa.Array | pa.ChunkedArray | pa.Scalar
Env = dict[int, Values]  # attribute id -> its values
Expr = Callable[[Env], Values]


class NotNative(Exception):
    """The plan holds something this module does not evaluate as Spark does."""


class Fallback(Exception):
    """These rows need Spark's own answer (an error, or an edge value this module does not mimic)."""


ARROW = {"boolean": pa.bool_(), "byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(),
         "float": pa.float32(), "double": pa.float64(), "string": pa.string()}
INTEGRAL = ("byte", "short", "integer", "long")
WIDER = {"byte": 0, "short": 1, "integer": 2, "long": 3}


# --- py4j access to Catalyst trees --------------------------------------------------------------

def _kind(node: Any) -> str:
    return str(node.getClass().getSimpleName())


def _seq(seq: Any) -> list[Any]:
    return [seq.apply(i) for i in range(seq.size())]


def _type(node: Any) -> str:
    return str(node.dataType().typeName())


def _mode(node: Any) -> str:
    """An arithmetic node's evaluation mode: ANSI, LEGACY or TRY (its place moved in Spark 4.1; unary
    minus and ``abs`` keep a flag)."""
    for get in (lambda: node.evalMode().toString(), lambda: node.evalContext().evalMode().toString(),
                lambda: "ANSI" if node.failOnError() else "LEGACY"):
        try:
            return str(get())
        except Exception:
            continue
    raise NotNative(f"{_kind(node)}: no evaluation mode")


def _any(values: Values) -> bool:
    """Is any value true (nulls skipped)?"""
    if isinstance(values, pa.Scalar):
        return bool(values.as_py())
    return bool(pc.any(values).as_py())


def _all(values: Values) -> bool:
    """Is every value true (nulls skipped)?"""
    if isinstance(values, pa.Scalar):
        return values.as_py() is not False
    return pc.all(values).as_py() is not False


# --- plans --------------------------------------------------------------------------------------

class ArrowProgram:
    """A compiled row-wise plan: a table of the scan's columns in, the plan's output out."""

    def __init__(self, relation: list[tuple[str, int]], steps: list[Callable[[Env, int], tuple[Env, int]]],
                 output: list[tuple[str, int]]) -> None:
        self.relation = relation
        self.steps = steps
        self.output = output
        self.schema: pa.Schema | None = None  # Spark's result schema, set from the first task's result

    def __call__(self, table: pa.Table) -> pa.Table:
        env: Env = {attr: _plain(table.column(name)) for name, attr in self.relation}
        rows = table.num_rows
        for step in self.steps:
            env, rows = step(env, rows)
        columns = [_column(env[attr], rows) for _, attr in self.output]
        out = pa.table(columns, names=[name for name, _ in self.output])
        return out if self.schema is None else out.cast(self.schema)


def _plain(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Large strings as strings, which Spark reads them as: kernels mixing the two are missing."""
    return pc.cast(values, pa.string()) if pa.types.is_large_string(values.type) else values


def _column(values: Values, rows: int) -> Values:
    if isinstance(values, pa.Scalar):
        return pa.repeat(values, rows)
    return values


def compile_plan(df: Any) -> ArrowProgram:
    """``df``'s optimised plan as an :class:`ArrowProgram`; :class:`NotNative` when it cannot be one."""
    try:
        plan = df._jdf.queryExecution().optimizedPlan()
    except Exception as exc:  # py4j: a Spark without these internals
        raise NotNative(f"no optimised plan: {exc}") from exc
    steps: list[Callable[[Env, int], tuple[Env, int]]] = []
    node = plan
    chain = []
    while _kind(node) != "LogicalRelation":
        children = _seq(node.children())
        if len(children) != 1:
            raise NotNative(f"plan node {_kind(node)}")
        chain.append(node)
        node = children[0]
    relation = [(str(a.name()), int(a.exprId().id())) for a in _seq(node.output())]
    for step in reversed(chain):
        steps.append(_step(step))
    output = [(str(a.name()), int(a.exprId().id())) for a in _seq(plan.output())]
    return ArrowProgram(relation, steps, output)


def _step(node: Any) -> Callable[[Env, int], tuple[Env, int]]:
    kind = _kind(node)
    if kind == "Project":
        named = [(int(e.exprId().id()), _expr(e)) for e in _seq(node.projectList())]

        def project(env: Env, rows: int) -> tuple[Env, int]:
            return {attr: expr(env) for attr, expr in named}, rows
        return project
    if kind == "Filter":
        condition = _expr(node.condition())

        def keep(env: Env, rows: int) -> tuple[Env, int]:
            mask = pc.fill_null(_column(condition(env), rows), False)
            kept = {attr: v if isinstance(v, pa.Scalar) else pc.filter(v, mask) for attr, v in env.items()}
            return kept, int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)
        return keep
    raise NotNative(f"plan node {kind}")


# --- expressions --------------------------------------------------------------------------------

def _expr(node: Any) -> Expr:
    kind = _kind(node)
    build = _BUILDERS.get(kind)
    if build is None:
        raise NotNative(f"expression {kind}")
    return build(node)


def _children(node: Any) -> list[Expr]:
    return [_expr(c) for c in _seq(node.children())]


def _attribute(node: Any) -> Expr:
    attr = int(node.exprId().id())
    return lambda env: env[attr]


def _literal(node: Any) -> Expr:
    name = _type(node)
    if name not in ARROW:
        raise NotNative(f"literal of type {name}")
    value = node.value()
    if value is not None and name == "string":
        value = str(value.toString())
    scalar = pa.scalar(value, ARROW[name])
    return lambda env: scalar


def _alias(node: Any) -> Expr:
    return _expr(node.child())


def _cast(node: Any) -> Expr:
    source, target = _type(node.child()), _type(node)
    child = _expr(node.child())
    if source == target:
        return child
    exact = ((source in INTEGRAL and target in INTEGRAL and WIDER[source] <= WIDER[target])
             or (source in INTEGRAL and target == "double") or (source == "float" and target == "double")
             or (source == "boolean" and (target in INTEGRAL or target == "double")))  # true 1, false 0
    if not exact:
        raise NotNative(f"cast from {source} to {target}")
    to = ARROW[target]
    return lambda env: pc.cast(child(env), to, safe=False)  # long -> double rounds to nearest, as Java's does


def _arithmetic(checked: Callable[..., Values], wrapping: Callable[..., Values]) -> Callable[[Any], Expr]:
    def build(node: Any) -> Expr:
        name = _type(node)
        left, right = _children(node)
        if name in INTEGRAL:
            mode = _mode(node)
            if mode == "TRY":
                raise NotNative(f"{_kind(node)} in TRY mode")
            op = checked if mode == "ANSI" else wrapping  # an overflow in ANSI raises: Fallback, below
        elif name in ("double", "float"):
            op = wrapping
        else:
            raise NotNative(f"{_kind(node)} of {name}")
        return lambda env: _guarded(op, left(env), right(env))
    return build


def _guarded(op: Callable[..., Values], *args: Values) -> Values:
    try:
        return op(*args)
    except pa.ArrowInvalid as exc:  # an integer overflow: Spark's own error, from Spark
        raise Fallback(str(exc)) from exc


def _divide(node: Any) -> Expr:
    if _type(node) != "double":
        raise NotNative(f"Divide of {_type(node)}")
    mode = _mode(node)
    left, right = _children(node)

    def divide(env: Env) -> Values:
        a, b = left(env), right(env)
        zero = pc.equal(b, 0.0)
        if _any(zero):
            if mode == "ANSI":
                raise Fallback("division by zero")  # Spark raises DIVIDE_BY_ZERO
            return pc.if_else(zero, pa.scalar(None, pa.float64()), pc.divide(a, b))
        return pc.divide(a, b)
    return divide


def _rounding(op: Callable[[Values], Values]) -> Callable[[Any], Expr]:
    def build(node: Any) -> Expr:
        source = _type(node.child())
        child = _expr(node.child())
        if source in INTEGRAL and _type(node) == "long":
            return lambda env: pc.cast(child(env), pa.int64())
        if source != "double" or _type(node) != "long":
            raise NotNative(f"{_kind(node)} of {source}")

        def rounded(env: Env) -> Values:
            values = op(child(env))
            inside = pc.and_(pc.greater_equal(values, -2.0 ** 63), pc.less(values, 2.0 ** 63))  # NaN: false
            if not _all(inside):
                raise Fallback(f"{_kind(node)} beyond a long")  # Scala's saturating toLong
            return pc.cast(values, pa.int64())
        return rounded
    return build


def _unary(checked: Callable[[Values], Values], plain: Callable[[Values], Values]) -> Callable[[Any], Expr]:
    def build(node: Any) -> Expr:
        name = _type(node)
        child = _expr(node.child())
        if name in INTEGRAL:
            mode = _mode(node)
            if mode == "TRY":
                raise NotNative(f"{_kind(node)} in TRY mode")
            op = checked if mode == "ANSI" else plain
        elif name in ("double", "float"):
            op = plain
        else:
            raise NotNative(f"{_kind(node)} of {name}")
        return lambda env: _guarded(op, child(env))
    return build


def _has_nan(values: Values) -> bool:
    if not pa.types.is_floating(values.type):
        return False
    return _any(pc.is_nan(values))


def _compared(op: Callable[[Values, Values], Values], a: Values, b: Values) -> Values:
    if _has_nan(a) or _has_nan(b):
        raise Fallback("NaN compared")  # Spark: NaN = NaN, and NaN above every number
    return op(a, b)


def _comparison(op: Callable[[Values, Values], Values]) -> Callable[[Any], Expr]:
    def build(node: Any) -> Expr:
        left, right = _children(node)
        return lambda env: _compared(op, left(env), right(env))
    return build


def _null_safe_equal(node: Any) -> Expr:
    left, right = _children(node)

    def equal(env: Env) -> Values:
        a, b = left(env), right(env)  # each side evaluated once
        both, either = pc.and_(pc.is_null(a), pc.is_null(b)), pc.or_(pc.is_null(a), pc.is_null(b))
        return pc.if_else(both, True, pc.if_else(either, False, _compared(pc.equal, a, b)))
    return equal


def _logic(op: Callable[[Values, Values], Values]) -> Callable[[Any], Expr]:
    def build(node: Any) -> Expr:
        left, right = _children(node)
        return lambda env: op(left(env), right(env))
    return build


def _one(op: Callable[[Values], Values]) -> Callable[[Any], Expr]:
    def build(node: Any) -> Expr:
        (child,) = _children(node)
        return lambda env: op(child(env))
    return build


def _is_nan(node: Any) -> Expr:
    (child,) = _children(node)
    return lambda env: pc.fill_null(pc.is_nan(child(env)), False)


def _case_when(node: Any) -> Expr:
    branches = [(_expr(b._1()), _expr(b._2())) for b in _seq(node.branches())]
    otherwise = node.elseValue()
    fallback = _expr(otherwise.get()) if otherwise.isDefined() else None
    to = ARROW.get(_type(node))
    if to is None:
        raise NotNative(f"CaseWhen of {_type(node)}")

    def case(env: Env) -> Values:
        conditions = [pc.fill_null(cond(env), False) for cond, _ in branches]
        values = [pc.cast(value(env), to) for _, value in branches]
        rest = pa.scalar(None, to) if fallback is None else pc.cast(fallback(env), to)
        if all(isinstance(c, pa.Scalar) for c in conditions):
            return next((v for c, v in zip(conditions, values) if c.as_py()), rest)
        rows = next(len(c) for c in conditions if not isinstance(c, pa.Scalar))
        struct = pc.make_struct(*[_column(c, rows) for c in conditions], field_names=[str(i) for i in range(len(conditions))])
        return pc.case_when(struct, *values, rest)
    return case


def _if(node: Any) -> Expr:
    predicate, yes, no = _children(node)
    return lambda env: pc.if_else(pc.fill_null(predicate(env), False), yes(env), no(env))


def _coalesce(node: Any) -> Expr:
    children = _children(node)
    return lambda env: pc.coalesce(*[c(env) for c in children])


def _literal_values(nodes: list[Any]) -> list[Any]:
    values = []
    for item in nodes:
        if _kind(item) != "Literal" or item.value() is None:
            raise NotNative("IN with a column or a null in its list")
        value = item.value()
        values.append(str(value.toString()) if _type(item) == "string" else value)
    return values


def _membership(value: Expr, options: list[Any], name: str) -> Expr:
    if name not in ARROW:
        raise NotNative(f"IN of {name}")
    allowed = pa.array(options, ARROW[name])

    def member(env: Env) -> Values:
        v = value(env)
        if _has_nan(v):
            raise Fallback("NaN in IN")
        return pc.if_else(pc.is_null(v), pa.scalar(None, pa.bool_()), pc.is_in(v, value_set=allowed))
    return member


def _in(node: Any) -> Expr:
    return _membership(_expr(node.value()), _literal_values(_seq(node.list())), _type(node.value()))


def _in_set(node: Any) -> Expr:
    name = _type(node.child())
    options = []
    found = node.hset().iterator()
    while found.hasNext():
        value = found.next()
        if value is None:
            raise NotNative("IN with a null in its list")
        options.append(str(value.toString()) if name == "string" else value)
    return _membership(_expr(node.child()), options, name)


def _non_nulls(node: Any) -> Expr:
    least = int(node.n())
    children = _children(node)

    def count(env: Env) -> Values:
        present = []
        for child in children:
            v = child(env)
            ok = pc.is_valid(v)
            if pa.types.is_floating(v.type):
                ok = pc.and_(ok, pc.invert(pc.fill_null(pc.is_nan(v), False)))  # dropna counts NaN as null
            present.append(pc.cast(ok, pa.int32()))
        total = present[0]
        for p in present[1:]:
            total = pc.add(total, p)
        return pc.greater_equal(total, least)
    return count


def _ascii(op: Callable[[Values], Values]) -> Callable[[Any], Expr]:
    def build(node: Any) -> Expr:
        (child,) = _children(node)

        def cased(env: Env) -> Values:
            v = child(env)
            if not _all(pc.string_is_ascii(v)):
                raise Fallback("non-ASCII text")  # Java's case mapping differs from Arrow's beyond ASCII
            return op(v)
        return cased
    return build


def _length(node: Any) -> Expr:
    if _type(node.child()) != "string":
        raise NotNative(f"Length of {_type(node.child())}")
    (child,) = _children(node)
    return lambda env: pc.utf8_length(child(env))


def _concat(node: Any) -> Expr:
    if _type(node) != "string":
        raise NotNative(f"Concat of {_type(node)}")
    children = _children(node)
    return lambda env: pc.binary_join_element_wise(*[c(env) for c in children], "")


def _pattern(op: Callable[..., Values]) -> Callable[[Any], Expr]:
    def build(node: Any) -> Expr:
        right = node.right()
        if _kind(right) != "Literal" or right.value() is None or _type(right) != "string":
            raise NotNative(f"{_kind(node)} with a pattern that is not a literal")
        pattern = str(right.value().toString())
        left = _expr(node.left())
        return lambda env: op(left(env), pattern=pattern)
    return build


_BUILDERS: dict[str, Callable[[Any], Expr]] = {
    "AttributeReference": _attribute, "Literal": _literal, "Alias": _alias, "Cast": _cast,
    "Add": _arithmetic(pc.add_checked, pc.add), "Subtract": _arithmetic(pc.subtract_checked, pc.subtract),
    "Multiply": _arithmetic(pc.multiply_checked, pc.multiply), "Divide": _divide,
    "Floor": _rounding(pc.floor), "Ceil": _rounding(pc.ceil),
    "UnaryMinus": _unary(pc.negate_checked, pc.negate), "Abs": _unary(pc.abs_checked, pc.abs),
    "EqualTo": _comparison(pc.equal), "LessThan": _comparison(pc.less),
    "LessThanOrEqual": _comparison(pc.less_equal), "GreaterThan": _comparison(pc.greater),
    "GreaterThanOrEqual": _comparison(pc.greater_equal), "EqualNullSafe": _null_safe_equal,
    "And": _logic(pc.and_kleene), "Or": _logic(pc.or_kleene), "Not": _one(pc.invert),
    "IsNull": _one(pc.is_null), "IsNotNull": _one(pc.is_valid), "IsNaN": _is_nan,
    "CaseWhen": _case_when, "If": _if, "Coalesce": _coalesce, "In": _in, "InSet": _in_set,
    "AtLeastNNonNulls": _non_nulls, "Upper": _ascii(pc.utf8_upper), "Lower": _ascii(pc.utf8_lower),
    "Length": _length, "Concat": _concat, "StartsWith": _pattern(pc.starts_with),
    "EndsWith": _pattern(pc.ends_with), "Contains": _pattern(pc.match_substring),
}
