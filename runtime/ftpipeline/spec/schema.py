"""The FTPipeline schema: one definition for local validation and the CRD.

Why a hand-written JSON Schema rather than a model library's generated one:
Kubernetes only accepts *structural* OpenAPI v3 schemas (no ``$ref``, every
node typed, no unions of types), and the same document is the contract for
``ftpipeline run`` and for ``kubectl apply``. Writing it once, in the subset
both sides accept, means a file that validates locally is accepted by the API
server and vice versa. One difference is rendered away: objects here say
``additionalProperties: false`` so local validation names unknown fields;
the API server forbids that beside ``properties`` and rejects unknown fields
through its strict field validation instead. ``crds/ftpipeline.yaml`` is rendered from
:data:`FTPIPELINE_SCHEMA` (see ``ftpipeline.spec.crd``); a test keeps the two
in step.

Checks a structural schema cannot express (exactly one stage kind, known
stage references, no cycles, an entry point that exists) live in
``ftpipeline.spec.load`` and report the same ``spec.x.y`` field paths.
"""

from __future__ import annotations

from typing import Any

API_GROUP = "ftpipeline.io"
API_VERSION = "v1alpha1"
KIND = "FTPipeline"

# DNS-1123 label: safe in pod names, Redis keys and object names (no dots).
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A Python identifier: the name of a function in the entry point module.
FUNCTION_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

Schema = dict[str, Any]


def _obj(description: str, properties: Schema, required: list[str] | None = None) -> Schema:
    node: Schema = {
        "type": "object",
        "description": description,
        "additionalProperties": False,
        "properties": properties,
    }
    if required:
        node["required"] = required
    return node


def _int(description: str, minimum: int | None = None, default: int | None = None) -> Schema:
    node: Schema = {"type": "integer", "description": description}
    if minimum is not None:
        node["minimum"] = minimum
    if default is not None:
        node["default"] = default
    return node


def _str(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


_FUNCTION = _str(
    "Name of a function in the entry point module.", pattern=FUNCTION_PATTERN, minLength=1
)

_GENERATOR = _obj(
    "Deterministic generated input: the function receives a context with a seeded "
    "random generator, the step, the channel and the row range, and returns a "
    "pyarrow.Table. The same step always yields the same rows.",
    {
        "function": _FUNCTION,
        "rowsPerStep": _int("Rows per step across all channels of the stage.", minimum=1),
        "seed": _int("Seed of the generator; steps and channels derive their own streams.", default=0),
    },
    ["function", "rowsPerStep"],
)

_FILE = _obj(
    "A directory of files read in deterministic per-step offset ranges. Each file "
    "belongs to one channel (stable hash of its name); rows are numbered in file-name "
    "order within a channel, and each step reads the next rowsPerStep/parallelism rows.",
    {
        "path": _str("Directory to read; relative paths are resolved against the pipeline file.", minLength=1),
        "format": _str("File format.", enum=["jsonl", "csv", "parquet"]),
        "schema": {
            "type": "object",
            "description": "Column name to type (string, long, double, boolean). Required for jsonl "
            "and csv; records that do not match go to the dead-letter output.",
            "additionalProperties": {"type": "string", "enum": ["string", "long", "double", "boolean"]},
        },
        "rowsPerStep": _int("Rows per step across all channels of the stage.", minimum=1),
        "follow": {
            "type": "boolean",
            "description": "Keep waiting for new files once the directory is read (default: stop at its end).",
            "default": False,
        },
    },
    ["path", "format", "rowsPerStep"],
)

_AGGREGATION = _obj(
    "One aggregate column of the running state.",
    {
        "name": _str("Output column.", pattern=FUNCTION_PATTERN),
        "op": _str("Aggregate function; count ignores column.", enum=["count", "sum", "min", "max"]),
        "column": _str("Input column (required except for count)."),
    },
    ["name", "op"],
)

_INPUT = _obj(
    "An upstream stage and how its rows are partitioned over this stage's channels.",
    {
        "stage": _str("Name of the upstream stage.", pattern=NAME_PATTERN),
        "partition": _str(
            "forward: channel i feeds channel i (equal parallelism); hash: by the hash of "
            "keys; broadcast: every channel receives every row. Default: hash on keyBy for "
            "an aggregate, forward when parallelism is equal, otherwise it must be given.",
            enum=["forward", "hash", "broadcast"],
        ),
        "keys": {"type": "array", "description": "Key columns for hash partitioning.", "items": {"type": "string"}},
    },
    ["stage"],
)

STAGE_SCHEMA: Schema = _obj(
    "A stage of the dataflow. Exactly one of source, transform, aggregate, sink.",
    {
        "name": _str("Stage name (DNS label).", pattern=NAME_PATTERN, maxLength=40),
        "parallelism": _int("Number of channels of this stage.", minimum=1, default=1),
        "inputs": {"type": "array", "description": "Upstream stages.", "items": _INPUT},
        "source": _obj(
            "Replayable input. Exactly one of generator, file.",
            {"generator": _GENERATOR, "file": _FILE},
        ),
        "transform": _obj(
            "Stateless transformation: a function DataFrame -> DataFrame from the entry point.",
            {"function": _FUNCTION},
            ["function"],
        ),
        "aggregate": _obj(
            "Keyed running aggregation. Each step emits the rows of the keys it touched, "
            "with their totals so far (update mode). Rows with a null key go to the "
            "dead-letter output.",
            {
                "keyBy": {"type": "array", "description": "Key columns.", "minItems": 1, "items": {"type": "string"}},
                "aggregations": {"type": "array", "description": "Aggregate columns.", "minItems": 1, "items": _AGGREGATION},
            },
            ["keyBy", "aggregations"],
        ),
        "sink": _obj(
            "Exactly-once output: each step is released as one atomic bundle.",
            {
                "parquet": _obj(
                    "A directory of Parquet files, one subdirectory per committed step (step=N).",
                    {"path": _str("Output directory; relative paths are resolved against the pipeline file.", minLength=1)},
                    ["path"],
                )
            },
            ["parquet"],
        ),
    },
    ["name"],
)

SPEC_SCHEMA: Schema = _obj(
    "Desired state of a fault-tolerant pipeline.",
    {
        "image": _str("Container image holding the runtime and the entry point (ignored by ftpipeline run).", minLength=1),
        "entryPoint": _str(
            "Python module with the pipeline's functions: a file path (relative to the pipeline "
            "file) or a dotted module name importable by the workers.",
            minLength=1,
        ),
        "workers": _int("Number of workers (each a Spark process plus a runtime sidecar).", minimum=1),
        "faultTolerance": {
            "type": "boolean",
            "description": "Keep lineage and buffered objects so a lost worker is recovered (default true). "
            "Off only for measuring its cost: a lost worker then fails the run.",
            "default": True,
        },
        "steps": _obj(
            "How steps are triggered.",
            {
                "mode": _str("lockstep: step S+1 starts when step S is committed. pipelined: up to `window` "
                             "steps run at once; checkpoints stay consistent through vector clocks.",
                             enum=["lockstep", "pipelined"], default="lockstep"),
                "window": _int("pipelined: how many uncommitted steps may be in flight.", minimum=1, default=3),
                "maxSteps": _int("Stop after this many committed steps (default: run until the input ends).", minimum=1),
                "trigger": _obj(
                    "Trigger reasons: records arrived across workers, a timer after the first record, a clock tick.",
                    {
                        "records": _int("Start a step once this many records are available across workers.", minimum=1, default=1),
                        "timerMs": _int("Start a step this long after the first record even if fewer arrived.", minimum=0, default=100),
                        "tickMs": _int("Start a step at least this often, even with no records (0: off).", minimum=0, default=0),
                    },
                ),
            },
        ),
        "recovery": _obj(
            "What happens when a worker is lost.",
            {"strategy": _str(
                "lineage: recompute only the lost work (a lost stateful channel restores its newest snapshot "
                "and replays what it consumed since). checkpoint: every worker reopens the newest committed "
                "checkpoint and sources replay from its offsets. auto: lineage where the lost work is stateless, "
                "or its state has a snapshot and its inputs since are alive; checkpoint otherwise.",
                enum=["lineage", "checkpoint", "auto"], default="lineage")},
        ),
        "checkpoint": _obj(
            "Consistent checkpoints: snapshots of stateful channels, committed in ZooKeeper as the resume point.",
            {
                "intervalSteps": _int("Checkpoint once this many steps passed since the last committed checkpoint (0: not by steps).", minimum=0, default=0),
                "intervalMs": _int("Checkpoint at least this often, in milliseconds (0: not by time).", minimum=0, default=0),
                "retain": _int("How many committed checkpoints to keep (older ones are deleted).", minimum=1, default=2),
                "storage": _obj(
                    "Where snapshots and in-flight messages are written (shared by all workers).",
                    {"path": _str("Directory; relative paths are resolved against the pipeline file.", minLength=1)},
                    ["path"],
                ),
            },
        ),
        "zookeeper": _obj(
            "Where committed checkpoints are recorded. Empty: ftpipeline run starts a private ZooKeeper.",
            {"connect": _str("ZooKeeper connect string, host:port[,host:port...].")},
        ),
        "gc": _obj(
            "Garbage collection of consumed objects.",
            {"intervalMs": _int("How often a worker drops consumed objects.", minimum=10, default=500)},
        ),
        "redis": _obj(
            "Lineage store. Empty: ftpipeline run starts a private Redis.",
            {"url": _str("redis:// or unix:// URL.")},
        ),
        "spark": _obj(
            "Spark session of each worker.",
            {
                "master": _str("Spark master of each worker's session.", default="local[1]"),
                "conf": {
                    "type": "object",
                    "description": "Extra Spark configuration.",
                    "additionalProperties": {"type": "string"},
                },
            },
        ),
        "deadLetter": _obj(
            "Where malformed records go.",
            {"path": _str("Directory; relative paths are resolved against the pipeline file.", minLength=1)},
            ["path"],
        ),
        "stages": {"type": "array", "description": "The dataflow.", "minItems": 1, "items": STAGE_SCHEMA},
    },
    ["image", "entryPoint", "workers", "stages"],
)

FTPIPELINE_SCHEMA: Schema = _obj(
    "A fault-tolerant PySpark pipeline.",
    {
        "apiVersion": _str("Must be ftpipeline.io/v1alpha1.", enum=[f"{API_GROUP}/{API_VERSION}"]),
        "kind": _str("Must be FTPipeline.", enum=[KIND]),
        "metadata": {
            "type": "object",
            "description": "Standard object metadata.",
            "properties": {"name": _str("Pipeline name (DNS label).", pattern=NAME_PATTERN, maxLength=40)},
            "required": ["name"],
        },
        "spec": SPEC_SCHEMA,
    },
    ["apiVersion", "kind", "metadata", "spec"],
)
