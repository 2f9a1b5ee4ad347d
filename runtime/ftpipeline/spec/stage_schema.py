"""The schema of one stage of the dataflow: its sources (generator, files, Kafka), transform, aggregate and
sinks (Parquet, Kafka), as ``schema.py`` embeds it in ``spec.stages``."""

from __future__ import annotations

from ftpipeline.spec.durations import PATTERN as DURATION_PATTERN, SIGNED_PATTERN
from ftpipeline.spec.nodes import (
    FUNCTION_PATTERN,
    NAME_PATTERN,
    Schema,
    integer,
    obj,
    one_of,
    string,
)

MAX_PARALLELISM = 512          # channels of one stage


_FUNCTION = string(
    "Name of a function in the entry point module.", pattern=FUNCTION_PATTERN, minLength=1
)

_GENERATOR = obj(
    "Deterministic generated input: the function receives a context with a seeded "
    "random generator, the step, the channel and the row range, and returns a "
    "pyarrow.Table. The same step always yields the same rows.",
    {
        "function": _FUNCTION,
        "rowsPerStep": integer("Rows per step across all channels of the stage.", minimum=1),
        "seed": integer("Seed of the generator; steps and channels derive their own streams.", default=0),
    },
    ["function", "rowsPerStep"],
)

_FILE = obj(
    "A directory of files read in deterministic per-step offset ranges. The files, sorted by name, are "
    "dealt to the channels in turn (the i-th to channel i mod parallelism: two files share a channel only "
    "when every channel has one); rows are numbered in file-name order within a channel, and each step reads "
    "the next rowsPerStep/parallelism rows.",
    {
        "path": string("Directory to read; relative paths are resolved against the pipeline file.", minLength=1),
        "format": string("File format.", enum=["jsonl", "csv", "parquet"]),
        "schema": {
            "type": "object",
            "description": "Column name to type (string, long, double, boolean). Required for jsonl "
            "and csv; records that do not match go to the dead-letter output.",
            "additionalProperties": {"type": "string", "enum": ["string", "long", "double", "boolean"]},
        },
        "rowsPerStep": integer("Rows per step across all channels of the stage.", minimum=1),
        "follow": {
            "type": "boolean",
            "description": "Keep waiting for new files once the directory is read (default: stop at its end).",
            "default": False,
        },
    },
    ["path", "format", "rowsPerStep"],
)

_COLUMN_TYPES = ["string", "long", "double", "boolean"]

_KAFKA_SOURCE = obj(
    "A Kafka topic. Its partitions are read in recorded offset ranges (partition p by channel p mod "
    "parallelism; partitions added while it runs join at the next step, from their start), committed "
    "transactions only (read_committed).",
    {
        "topic": string("Topic to read.", minLength=1, maxLength=249, pattern=r"^[A-Za-z0-9._-]+$"),
        "format": string("json: each value is a JSON object holding the schema's columns (records that are not go "
                       "to the dead-letter output). raw: the columns key and value (binary), topic, partition, "
                       "offset and timestamp (milliseconds).", enum=["json", "raw"], default="json"),
        "schema": {
            "type": "object",
            "description": "Column name to type (string, long, double, boolean). Required for format json.",
            "additionalProperties": {"type": "string", "enum": _COLUMN_TYPES},
        },
        "startingOffsets": string("Where a fresh run starts each partition: earliest (default), latest, or timestamp "
                                "(the first record at or after startingTimestampMs). A resumed run continues where "
                                "its step log says.", enum=["earliest", "latest", "timestamp"], default="earliest"),
        "startingTimestampMs": integer("Milliseconds since the epoch, for startingOffsets timestamp.", minimum=0),
        "endingOffsets": string("latest: the run ends once every partition is read up to the end it had when the "
                              "worker began reading it (Spark's availableNow). Unset: it never ends.",
                              enum=["latest"]),
        "maxRecordsPerStep": integer("Most offsets one step reads across the topic's partitions, shared in proportion "
                                  "to their backlog (0: all available).", minimum=0, default=0),
    },
    ["topic"],
)

def _table(description: str, kafka: bool = False) -> Schema:
    """A table a stage reads: a Delta table or a directory of Parquet files (or, for a lookup, a compacted
    Kafka topic)."""
    kinds: dict[str, Schema] = {
        "delta": obj("A Delta table.", {"path": string("Table directory, or s3://bucket/prefix; relative paths are "
                                                       "resolved against the pipeline file.", minLength=1)}, ["path"]),
        "parquet": obj("A directory of Parquet files.", {"path": string(
            "Directory, or s3://bucket/prefix; relative paths are resolved against the pipeline file.",
            minLength=1)}, ["path"]),
    }
    if kafka:
        kinds["kafka"] = obj(
            "A compacted Kafka topic (cleanup.policy=compact) of the pipeline's cluster (spec.kafka): each record's "
            "value a JSON object holding the schema's columns, its key the row's identity (the last value of a key "
            "is its row; a null value deletes it). Read up to the ends its partitions had when each step started; "
            "those offsets are recorded with the step.",
            {"topic": string("Topic to read.", minLength=1, maxLength=249, pattern=r"^[A-Za-z0-9._-]+$"),
             "schema": {"type": "object", "description": "Column name to type (string, long, double, boolean).",
                        "minProperties": 1, "additionalProperties": {"type": "string", "enum": _COLUMN_TYPES}}},
            ["topic", "schema"])
    return obj(description, kinds, rules=[one_of(*kinds)])


def _duration(description: str) -> Schema:
    return string(description + " A whole number and a unit: ms, s, m (or min), h, d.", pattern=DURATION_PATTERN)


_EVENT_TIME = obj(
    "The event time of the source's records, and the watermark it drives. Each channel's "
    "watermark is the largest event time it has read less maxOutOfOrderness; the pipeline's is the smallest "
    "over every source channel that is not idle, recorded with each step before its tasks run.",
    {
        "column": string("Column holding each record's event time: a timestamp, or a long of milliseconds "
                         "since the epoch.", pattern=FUNCTION_PATTERN),
        "recordTimestamp": {"type": "boolean", "description": "Kafka only: fill the column with each record's "
                            "timestamp (milliseconds) instead of reading it from the record.", "default": False},
        "watermark": obj(
            "How far behind the largest event time read the watermark stays.",
            {"maxOutOfOrderness": _duration("Records at most this much older than the newest one read are "
                                            "still on time.")},
            ["maxOutOfOrderness"],
        ),
        "idleTimeout": _duration("A channel that reads no record for this long (wall clock) stops holding the "
                                 "watermark back until it reads again, as Flink's withIdleness. Unset: never idle."),
    },
    ["column"],
)

_LATE_DATA = obj(
    "Where records behind the watermark go instead of being dropped, with the reason and the watermark they "
    "missed. Exactly one of path, topic.",
    {"path": string("Directory, or s3://bucket/prefix: each step's late records of each channel as one Parquet "
                    "file; relative paths are resolved against the pipeline file.", minLength=1),
     "topic": string("Kafka topic (it must exist; spec.kafka names the cluster): each step's late records in one "
                     "transaction committed when the step is released, as JSON objects keyed by the stage's keys, "
                     "so read_committed consumers see each late record once.",
                     minLength=1, maxLength=249, pattern=r"^[A-Za-z0-9._-]+$")},
    rules=[one_of("path", "topic")],
)

_WINDOW = obj(
    "Event-time windows: the aggregate runs per key and window instead of per key. "
    "Exactly one of tumbling, sliding, session.",
    {
        "tumbling": obj("Fixed windows that do not overlap.", {"size": _duration("Window length.")}, ["size"]),
        "sliding": obj("Windows of size that start every slide (hopping); size a multiple of slide.",
                       {"size": _duration("Window length."), "slide": _duration("Distance between starts.")},
                       ["size", "slide"]),
        "session": obj("Per key, records closer than gap in event time are one window: from the first record "
                       "to the last plus gap. A record that bridges two sessions merges them.",
                       {"gap": _duration("Inactivity that ends a session.")}, ["gap"]),
        "timeColumn": string("Event-time column the windows are cut on (default: the eventTime column of the "
                             "sources upstream).", pattern=FUNCTION_PATTERN),
        "allowedLateness": _duration("How long after its end a window still takes records (default 0)."),
        "emit": string("append: each window once, when the watermark passes its end plus allowedLateness. "
                       "update: every step that changed a window emits its current row.",
                       enum=["append", "update"], default="append"),
        "lateData": _LATE_DATA,
    },
    rules=[one_of("tumbling", "sliding", "session")],
)

_AGGREGATION = obj(
    "One aggregate column of the running state.",
    {
        "name": string("Output column.", pattern=FUNCTION_PATTERN),
        "op": string("Aggregate function; count ignores column. avg, first and last (by event time) and "
                     "countDistinct (exact: the values of an open window are kept until it fires) need a window.",
                     enum=["count", "sum", "min", "max", "avg", "first", "last", "countDistinct"]),
        "column": string("Input column (required except for count)."),
    },
    ["name", "op"],
)

_INPUT = obj(
    "An upstream stage and how its rows are partitioned over this stage's channels.",
    {
        "stage": string("Name of the upstream stage.", pattern=NAME_PATTERN, maxLength=40),
        "partition": string(
            "forward: channel i feeds channel i (equal parallelism); hash: by the hash of "
            "keys; broadcast: every channel receives every row. Default: hash on keyBy for "
            "an aggregate, forward when parallelism is equal, otherwise it must be given.",
            enum=["forward", "hash", "broadcast"],
        ),
        "keys": {"type": "array", "description": "Key columns for hash partitioning.", "maxItems": 16,
                 "items": {"type": "string"}},
    },
    ["stage"],
)

STAGE_SCHEMA: Schema = obj(
    "A stage of the dataflow. Exactly one of source, transform, aggregate, deduplicate, join, process, lookup, "
    "sink.",
    {
        "name": string("Stage name (DNS label).", pattern=NAME_PATTERN, maxLength=40),
        "parallelism": {**integer("Number of channels of this stage.", minimum=1, default=1),
                        "maximum": MAX_PARALLELISM},
        "inputs": {"type": "array", "description": "Upstream stages.", "maxItems": 16, "items": _INPUT},
        "source": obj(
            "Replayable input. Exactly one of generator, file, kafka.",
            {"generator": _GENERATOR, "file": _FILE, "kafka": _KAFKA_SOURCE, "eventTime": _EVENT_TIME},
            rules=[one_of("generator", "file", "kafka")],
        ),
        "transform": obj(
            "Stateless transformation: a function DataFrame -> DataFrame from the entry point.",
            {"function": _FUNCTION},
            ["function"],
        ),
        "aggregate": obj(
            "Keyed aggregation. Without a window, a running one: each step emits the rows of the keys it "
            "touched, with their totals so far (update mode). With a window, per key and event-time window. "
            "Rows with a null key go to the dead-letter output.",
            {
                "keyBy": {"type": "array", "description": "Key columns.", "minItems": 1, "maxItems": 16,
                          "items": {"type": "string"}},
                "aggregations": {"type": "array", "description": "Aggregate columns.", "minItems": 1, "maxItems": 64,
                                 "items": _AGGREGATION},
                "window": _WINDOW,
                "ttl": obj(
                    "State time-to-live: a key not updated for longer is forgotten (its next row starts new "
                    "totals) and leaves the state and its checkpoints.",
                    {"steps": integer("Forget a key once this many steps passed without an update to it.", minimum=1)},
                    ["steps"],
                ),
            },
            ["keyBy", "aggregations"],
        ),
        "deduplicate": obj(
            "Drop duplicates within an event-time horizon (as Spark's dropDuplicatesWithinWatermark): the first "
            "record of a key passes, and any other of that key is dropped until the watermark passes the first "
            "one's event time plus within. A record behind the watermark is late: whether it repeats an earlier "
            "one can no longer be told.",
            {
                "keys": {"type": "array", "description": "Columns that make two records the same.", "minItems": 1,
                         "maxItems": 16, "items": {"type": "string"}},
                "within": _duration("How long (event time) a key is remembered after its first record."),
                "timeColumn": string("Event-time column (default: the eventTime column of the sources upstream).",
                                     pattern=FUNCTION_PATTERN),
                "lateData": _LATE_DATA,
            },
            ["keys", "within"],
        ),
        "join": obj(
            "Join two streams on keys within an event-time interval (Flink's interval join, Spark's time-bounded "
            "stream-stream join): inputs[0] is the left side, inputs[1] the right, and a left row L and a right "
            "row R join when their keys are equal and R's time minus L's time lies within [lower, upper]. Both "
            "sides' rows are kept in the state backend until the watermark shows no row that could still "
            "arrive would match them; then they leave, and an outer join emits an unmatched one with nulls for "
            "the other side. A row behind the watermark is late. The output holds the keys, then the left "
            "side's other columns, then the right's; a name both sides have is prefixed left_ and right_.",
            {
                "type": string("inner, left (outer), right (outer) or full (outer).",
                               enum=["inner", "left", "right", "full"], default="inner"),
                "keys": {"type": "array", "description": "Columns both sides have, equal in a pair (of the same "
                         "types on both sides).", "minItems": 1, "maxItems": 16, "items": {"type": "string"}},
                "within": obj(
                    "The interval of the right row's event time, relative to the left row's.",
                    {"lower": string("Earliest: R.time >= L.time + lower (may be negative: -5m).",
                                     pattern=SIGNED_PATTERN),
                     "upper": string("Latest: R.time <= L.time + upper (may be negative).", pattern=SIGNED_PATTERN)},
                    ["lower", "upper"],
                ),
                "timeColumn": string("Event-time column of both sides (default: the eventTime column of the "
                                     "sources upstream of each side).", pattern=FUNCTION_PATTERN),
                "lateData": _LATE_DATA,
            },
            ["keys", "within"],
        ),
        "lookup": obj(
            "Join each row to a table (a stream-table join): a Delta table, read at its newest version when each "
            "step starts (the version is recorded with the step, so a replay joins the same rows), or a Parquet "
            "directory read once (it must not change while the pipeline runs: a change fails the step, naming "
            "it). Each row is joined to every table row with equal keys; the output holds the row's columns, "
            "then the table's others (a name both have is prefixed table_).",
            {
                "table": _table("The table. Exactly one of delta, parquet, kafka.", kafka=True),
                "keys": {"type": "array", "description": "Columns of both the rows and the table, equal in a match.",
                         "minItems": 1, "maxItems": 16, "items": {"type": "string"}},
                "type": string("inner (a row with no match is dropped) or left (kept, with nulls).",
                               enum=["inner", "left"], default="inner"),
            },
            ["table", "keys"],
        ),
        "process": obj(
            "A keyed function of your own (Flink's KeyedProcessFunction, Spark's transformWithState): a class of the "
            "entry point whose process(key, rows, ctx) is handed each step's rows of one key and returns rows "
            "(a pandas DataFrame, an Arrow table, a list of dicts, or None), with value, list and map state "
            "(ctx.value/list/map(name, ttl=...)) and timers (ctx.timers), and on_timer(key, timer, ctx) called when "
            "one fires. Its state lives in the state backend, is checkpointed and re-partitioned by key, and a "
            "replay hands it the same rows, watermark and clock: the function must read time only from ctx "
            "(ctx.now, ctx.watermark) and draw randomness only from ctx.rng. Every time of this API (ctx.now, "
            "ctx.watermark, timers, timer.time, a ttl given as a number) is milliseconds since the epoch.",
            {
                "class": string("Name of the class in the entry point module.", pattern=FUNCTION_PATTERN),
                "keys": {"type": "array", "description": "Key columns (the input is hashed on them).",
                         "minItems": 1, "maxItems": 16, "items": {"type": "string"}},
                "output": {"type": "object", "description": "The columns the function returns, name to type "
                           "(string, long, double, boolean, timestamp); a missing column is an error naming it.",
                           "minProperties": 1, "additionalProperties": {"type": "string", "enum": [
                               *_COLUMN_TYPES, "timestamp"]}},
                "rows": string("How a key's rows are handed over: arrow (a pyarrow Table) or pandas (a DataFrame; "
                               "pandas must be installed beside the pipeline's code).",
                               enum=["arrow", "pandas"], default="arrow"),
                "initialState": _table(
                    "State to start from (Spark's initialState, handleInitialState): before a fresh run's first "
                    "step, the class's init_state(key, rows, ctx) is called with each key's rows of this table "
                    "(the key columns as in keys, of the same types as the stream's), and may set state and "
                    "timers; it returns nothing. A Delta table is read at the version current at the first "
                    "step's recorded processing time (so a replay reads the same rows); a Parquet directory "
                    "must not change until the first checkpoint. Exactly one of delta, parquet."),
            },
            ["class", "keys", "output"],
        ),
        "sink": obj(
            "Exactly-once output: each step is released as one atomic bundle. Exactly one of parquet, kafka, "
            "delta.",
            {
                "parquet": obj(
                    "A directory of Parquet files, one subdirectory per committed step (step=N).",
                    {"path": string("Output directory (relative paths are resolved against the pipeline file), or "
                                    "s3://bucket/prefix: each step released by a commit object there, which readers "
                                    "follow (the README's object storage section).", minLength=1)},
                    ["path"],
                ),
                "kafka": obj(
                    "A Kafka topic, written exactly once: each step's rows of each sink channel in one transaction, "
                    "committed when the step is released, so read_committed consumers see every row once. Rows "
                    "are JSON objects.",
                    {
                        "topic": string("Topic to write (it must exist).", minLength=1, maxLength=249,
                                      pattern=r"^[A-Za-z0-9._-]+$"),
                        "key": {"type": "array", "description": "Columns of the record key: one column's value "
                                "as text, several as a JSON array. Kafka's partitioner then puts equal keys in one "
                                "partition. Unset: no key.", "maxItems": 16, "items": {"type": "string"}},
                    },
                    ["topic"],
                ),
                "delta": obj(
                    "A Delta Lake table (created by the first step when absent), written exactly once: each step "
                    "one Delta commit whose transaction (txnAppId: the pipeline and sink, txnVersion: the step) "
                    "is read back before each release, so a step the table already holds is never written "
                    "again. A column of another type than the table's is refused, not cast. Readable by Spark "
                    "with delta-spark, or by any Delta reader.",
                    {
                        "path": string("Table directory, or s3://bucket/prefix (each step's commit is a "
                                       "conditional put there: no lock table); relative paths are resolved "
                                       "against the pipeline file.", minLength=1),
                        "partitionBy": {"type": "array", "description": "Columns the table is partitioned by "
                                        "(used when the first step creates it).", "maxItems": 8,
                                        "items": {"type": "string", "minLength": 1}},
                        "mergeSchema": {"type": "boolean", "description": "Schema evolution: let a step add "
                                        "columns to the table. Off by default: a step whose schema differs from "
                                        "the table's fails the run, naming this field."},
                    },
                    ["path"],
                ),
                "existingOutput": string(
                    "What a fresh run does when the sink's directory already holds released steps: fail (the "
                    "default: the run fails naming the path, nothing is touched), overwrite (the old steps and "
                    "the pipeline's dead letters are removed first), resume (the old steps are kept; the barrier "
                    "drops the steps it already holds). A resumed run never checks.",
                    enum=["fail", "overwrite", "resume"]),
            },
            rules=[one_of("parquet", "kafka", "delta")],
        ),
    },
    ["name"],
    rules=[one_of("source", "transform", "aggregate", "deduplicate", "join", "process", "lookup", "sink")],
)
