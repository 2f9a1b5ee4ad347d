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

from ftpipeline.spec.cel import Rule, rule

# What one pipeline may ask for, so that no spec can exhaust the operator or the lineage store before
# anything runs (checked by the CRD at admission and by the runtime's validation, spec/load.py).
MAX_PARALLELISM = 512          # channels of one stage
MAX_WORKERS = 128
MAX_CHANNELS = 2048            # channels of all stages together (tasks per step)
MAX_OBJECTS_PER_STEP = 65536   # objects handed between channels per step (a hash edge makes producers x consumers)
# A fault-tolerant pipeline that sets no checkpoint interval checkpoints this often: what a stateful stage
# keeps for its rebuild (its inputs since its snapshot), the lineage tables and the step log are then
# bounded by this many steps, however long the run. Spark SS commits state every micro-batch; Flink
# leaves checkpoints off unless asked. Ours are incremental (only changed table files upload), so a
# short interval costs little.
DEFAULT_CHECKPOINT_STEPS = 10
# A task whose input is larger than this has Spark write its result instead of returning it (dataflow/spill.py).
DEFAULT_MAX_IN_MEMORY_BYTES = 64 * 1024 * 1024

# Rules the API server checks on spec.stages as a whole; the loader names the stage itself (spec/load.py)
UNIQUE_STAGES = "stage names must be unique"
KNOWN_INPUTS = "every inputs[].stage must name a stage of spec.stages"

API_GROUP = "ftpipeline.io"
API_VERSION = "v1alpha1"
KIND = "FTPipeline"
PLURAL = "ftpipelines"

# DNS-1123 label: safe in pod names, Redis keys and object names (no dots).
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A Python identifier: the name of a function in the entry point module.
FUNCTION_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

Schema = dict[str, Any]


def _obj(description: str, properties: Schema, required: list[str] | None = None,
         rules: list[Rule] | None = None) -> Schema:
    node: Schema = {
        "type": "object",
        "description": description,
        "additionalProperties": False,
        "properties": properties,
    }
    if required:
        node["required"] = required
    if rules:
        node["x-kubernetes-validations"] = rules
    return node


def _bool(description: str, default: bool) -> Schema:
    return {"type": "boolean", "description": description, "default": default}


def _one_of(*fields: str) -> Rule:
    present = ", ".join(f"has(self.{f})" for f in fields)
    return rule(f"[{present}].filter(x, x).size() == 1", f"needs exactly one of {', '.join(fields)}")


def _either(a: str, b: str) -> Rule:
    return rule(f"!(has(self.{a}) && has(self.{b}))", f"set {a} or {b}, not both")


def _int(description: str, minimum: int | None = None, default: int | None = None) -> Schema:
    node: Schema = {"type": "integer", "description": description}
    if minimum is not None:
        node["minimum"] = minimum
    if default is not None:
        node["default"] = default
    return node


def _str(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


_SECRET_REF = _obj(
    "A key of a Secret in the pipeline's namespace.",
    {"name": _str("Secret name.", minLength=1), "key": _str("Key within the Secret.", minLength=1)},
    ["name", "key"],
)

_QUANTITIES = {
    "type": "object",
    "description": "Resource name (cpu, memory) to quantity.",
    "additionalProperties": {"x-kubernetes-int-or-string": True,
                             "anyOf": [{"type": "integer"}, {"type": "string"}]},
}

_RESOURCES = _obj(
    "Compute resources of the container, as in a Pod (ignored by ftpipeline run).",
    {"requests": _QUANTITIES, "limits": _QUANTITIES},
)


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

_COLUMN_TYPES = ["string", "long", "double", "boolean"]

_KAFKA_SOURCE = _obj(
    "A Kafka topic. Its partitions are read in recorded offset ranges (partition p by channel p mod "
    "parallelism; partitions added while it runs join at the next step, from their start), committed "
    "transactions only (read_committed).",
    {
        "topic": _str("Topic to read.", minLength=1, maxLength=249, pattern=r"^[A-Za-z0-9._-]+$"),
        "format": _str("json: each value is a JSON object holding the schema's columns (records that are not go "
                       "to the dead-letter output). raw: the columns key and value (binary), topic, partition, "
                       "offset and timestamp (milliseconds).", enum=["json", "raw"], default="json"),
        "schema": {
            "type": "object",
            "description": "Column name to type (string, long, double, boolean). Required for format json.",
            "additionalProperties": {"type": "string", "enum": _COLUMN_TYPES},
        },
        "startingOffsets": _str("Where a fresh run starts each partition: earliest (default), latest, or timestamp "
                                "(the first record at or after startingTimestampMs). A resumed run continues where "
                                "its step log says.", enum=["earliest", "latest", "timestamp"], default="earliest"),
        "startingTimestampMs": _int("Milliseconds since the epoch, for startingOffsets timestamp.", minimum=0),
        "endingOffsets": _str("latest: the run ends once every partition is read up to the end it had when the "
                              "worker began reading it (Spark's availableNow). Unset: it never ends.",
                              enum=["latest"]),
        "maxRecordsPerStep": _int("Most offsets one step reads across the topic's partitions, shared in proportion "
                                  "to their backlog (0: all available).", minimum=0, default=0),
    },
    ["topic"],
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
        "keys": {"type": "array", "description": "Key columns for hash partitioning.", "maxItems": 16,
                 "items": {"type": "string"}},
    },
    ["stage"],
)

STAGE_SCHEMA: Schema = _obj(
    "A stage of the dataflow. Exactly one of source, transform, aggregate, sink.",
    {
        "name": _str("Stage name (DNS label).", pattern=NAME_PATTERN, maxLength=40),
        "parallelism": {**_int("Number of channels of this stage.", minimum=1, default=1),
                        "maximum": MAX_PARALLELISM},
        "inputs": {"type": "array", "description": "Upstream stages.", "maxItems": 16, "items": _INPUT},
        "source": _obj(
            "Replayable input. Exactly one of generator, file, kafka.",
            {"generator": _GENERATOR, "file": _FILE, "kafka": _KAFKA_SOURCE},
            rules=[_one_of("generator", "file", "kafka")],
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
                "keyBy": {"type": "array", "description": "Key columns.", "minItems": 1, "maxItems": 16,
                          "items": {"type": "string"}},
                "aggregations": {"type": "array", "description": "Aggregate columns.", "minItems": 1, "maxItems": 64,
                                 "items": _AGGREGATION},
                "ttl": _obj(
                    "State time-to-live: a key not updated for longer is forgotten (its next row starts new "
                    "totals) and leaves the state and its checkpoints.",
                    {"steps": _int("Forget a key once this many steps passed without an update to it.", minimum=1)},
                    ["steps"],
                ),
            },
            ["keyBy", "aggregations"],
        ),
        "sink": _obj(
            "Exactly-once output: each step is released as one atomic bundle. Exactly one of parquet, kafka.",
            {
                "parquet": _obj(
                    "A directory of Parquet files, one subdirectory per committed step (step=N).",
                    {"path": _str("Output directory; relative paths are resolved against the pipeline file.", minLength=1)},
                    ["path"],
                ),
                "kafka": _obj(
                    "A Kafka topic, written exactly once: each step's rows of each sink channel in one transaction, "
                    "committed when the step is released, so read_committed consumers see every row once. Rows "
                    "are JSON objects.",
                    {
                        "topic": _str("Topic to write (it must exist).", minLength=1, maxLength=249,
                                      pattern=r"^[A-Za-z0-9._-]+$"),
                        "key": {"type": "array", "description": "Columns of the record key: one column's value "
                                "as text, several as a JSON array. Kafka's partitioner then puts equal keys in one "
                                "partition. Unset: no key.", "maxItems": 16, "items": {"type": "string"}},
                    },
                    ["topic"],
                ),
                "existingOutput": _str(
                    "What a fresh run does when the sink's directory already holds released steps: fail (the "
                    "default: the run fails naming the path, nothing is touched), overwrite (the old steps and "
                    "the pipeline's dead letters are removed first), resume (the old steps are kept; the barrier "
                    "drops the steps it already holds). A resumed run never checks.",
                    enum=["fail", "overwrite", "resume"]),
            },
            rules=[_one_of("parquet", "kafka")],
        ),
    },
    ["name"],
    rules=[_one_of("source", "transform", "aggregate", "sink")],
)

SPEC_SCHEMA: Schema = _obj(
    "Desired state of a fault-tolerant pipeline.",
    {
        "image": _str("Container image holding the runtime and the entry point (ignored by ftpipeline run). "
                      "Default: the operator's own image.", minLength=1),
        "imagePullPolicy": _str("When the kubelet pulls the image. Default: IfNotPresent, or the operator's own "
                                "policy when the image is the operator's.", enum=["Always", "IfNotPresent", "Never"]),
        "entryPoint": _str(
            "Python module with the pipeline's functions: a file path (relative to the pipeline "
            "file) or a dotted module name importable by the workers.",
            minLength=1,
        ),
        "workers": {**_int("Number of workers (each a Spark process plus a runtime sidecar).", minimum=1),
                    "maximum": MAX_WORKERS},
        "faultTolerance": _bool("Keep lineage and buffered objects so a lost worker is recovered (default true). "
                                "Off only for measuring its cost: a lost worker then fails the run.", True),
        "chaining": _bool("Run neighbouring stages joined one-to-one (a forward edge that is the upstream's only "
                          "output and the downstream's only input; the downstream a transform or a sink) as one "
                          "task and one Spark job, as Flink chains operators (default true). Lineage is then kept "
                          "at the chains' boundaries. Off: every stage is a task of its own.", True),
        "reusePlans": _bool("Build each chain's Spark plan once per worker and input schema, and run it on every "
                            "step's rows, as Structured Streaming runs a query's plan on each micro-batch (default "
                            "true). The pipeline's functions are then called once, not per step, so they must "
                            "describe a transformation and not act per call. Off: they are called for every task.",
                            True),
        "suspend": _bool("Stop the workers and keep the pipeline's state (Redis, checkpoints, output). Setting it "
                         "back to false resumes from the newest checkpoint and the step log.", False),
        "checkpointNonce": _str("Change this value (any string) to take a checkpoint now."),
        "restartNonce": _str("Change this value (any string) to restart every worker; the pipeline resumes from "
                             "its newest checkpoint with no lost or repeated step."),
        "progressDeadlineSeconds": _int("Seconds without a committed step after which the pipeline is reported "
                                        "Stalled (condition Stalled, an Event).", minimum=1, default=600),
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
            {
                "strategy": _str(
                    "lineage: recompute only the lost work (a lost stateful channel restores its newest snapshot "
                    "and replays what it consumed since). checkpoint: every worker reopens the newest committed "
                    "checkpoint and sources replay from its offsets. auto: lineage where the lost work is stateless, "
                    "or its state has a snapshot and its inputs since are alive; checkpoint otherwise.",
                    enum=["lineage", "checkpoint", "auto"], default="lineage"),
                "heartbeatTimeoutMs": {**_int(
                    "A worker that does not answer ZooKeeper for this long (hung, stopped, cut off) loses its "
                    "heartbeat and is recovered like a deleted one. The ZooKeeper server bounds it to between "
                    "2 and 20 of its ticks.", minimum=1000, default=6000), "maximum": 600000},
                "restartBudget": _obj(
                    "How many lost workers are replaced before the pipeline fails (like a Job's backoffLimit).",
                    {
                        "maxRestarts": _int("Replacements allowed within windowSeconds.", minimum=0, default=5),
                        "windowSeconds": _int("The sliding window the budget is counted in.", minimum=1, default=600),
                    },
                ),
                "backoff": _obj(
                    "Delay before a replacement worker starts; recovery on the survivors never waits for it.",
                    {
                        "initialMs": _int("Delay before the first replacement in the window.", minimum=0, default=1000),
                        "maxMs": _int("The delay doubles with each loss in the window up to this.", minimum=0,
                                      default=60000),
                        "jitterPercent": {**_int("Random spread of each delay, in percent.", minimum=0, default=20),
                                          "maximum": 100},
                    },
                    rules=[rule("!has(self.initialMs) || !has(self.maxMs) || self.maxMs >= self.initialMs",
                                "maxMs must be at least initialMs")],
                ),
            },
        ),
        "checkpoint": _obj(
            "Consistent checkpoints: snapshots of stateful channels, committed in ZooKeeper as the resume point.",
            {
                "intervalSteps": _int("Checkpoint once this many steps passed since the last committed checkpoint (0: not by "
                                      "steps). When neither interval is set, a fault-tolerant pipeline checkpoints every "
                                      f"{DEFAULT_CHECKPOINT_STEPS} steps; setting both to 0 turns checkpoints off, and "
                                      "buffers, lineage tables and recovery work then grow with the run.", minimum=0),
                "intervalMs": _int("Checkpoint at least this often, in milliseconds (0: not by time).", minimum=0),
                "retain": _int("How many committed checkpoints to keep (older ones are deleted).", minimum=1, default=2),
                "storage": _obj(
                    "Where snapshots and in-flight messages are written (shared by all workers).",
                    {"path": _str("Directory; relative paths are resolved against the pipeline file.", minLength=1)},
                    ["path"],
                ),
            },
        ),
        "state": _obj(
            "Where stateful stages keep their per-key state.",
            {
                "backend": _str("rocksdb: an embedded RocksDB per stateful channel on the worker's disk (state larger "
                                "than memory, a step costs what it touches, incremental checkpoints). memory: one "
                                "Arrow table in the Spark process (tiny state, tests).",
                                enum=["rocksdb", "memory"], default="rocksdb"),
            },
        ),
        "zookeeper": _obj(
            "Where the command log, the workers' heartbeats and committed checkpoints are kept. Empty: "
            "ftpipeline run starts a private ZooKeeper; the operator uses its own default.",
            {"connect": _str("ZooKeeper connect string, host:port[,host:port...]; digest://user:password@hosts "
                             "authenticates; a ?ca=/path/ca.crt suffix connects over TLS trusting that CA."),
             "secretRef": _SECRET_REF},
            rules=[_either("connect", "secretRef")],
        ),
        "kafka": _obj(
            "The Kafka cluster of the pipeline's Kafka sources and sinks.",
            {"bootstrapServers": _str(
                "host:port[,host:port...] (plaintext); ssl://hosts?ca=/path/ca.crt connects over TLS trusting that "
                "CA (else the system's); sasl-ssl://user:password@hosts?mechanism=SCRAM-SHA-512&ca=/path/ca.crt "
                "(or sasl-plaintext://) authenticates, PLAIN unless a mechanism is given. Empty: ftpipeline run "
                "starts a private broker; the operator uses its own default (the chart's kafka.enabled)."),
             "secretRef": {**_SECRET_REF, "description": "A key of a Secret of the pipeline's namespace holding the "
                           "endpoint (as bootstrapServers, credentials included): given to the workers, never "
                           "written into their pods (ignored by ftpipeline run)."},
             "caSecretRef": {**_SECRET_REF, "description": "A key of a Secret of the pipeline's namespace holding "
                             "the PEM CA the workers trust for ssl:// and sasl-ssl:// endpoints that name no ?ca= "
                             "(ignored by ftpipeline run: set FTPIPELINE_KAFKA_CA)."}},
            rules=[_either("bootstrapServers", "secretRef")],
        ),
        "gc": _obj(
            "Garbage collection of consumed objects.",
            {"intervalMs": _int("How often a worker drops consumed objects.", minimum=10, default=500)},
        ),
        "redis": _obj(
            "Lineage store. Empty: ftpipeline run starts a private Redis; the operator uses its own default.",
            {"url": _str("redis://, unix:// or (TLS) rediss:// URL; rediss://...?ssl_ca_certs=/path/ca.crt trusts "
                         "that CA."), "secretRef": _SECRET_REF},
            rules=[_either("url", "secretRef")],
        ),
        "spark": _obj(
            "Spark session of each worker.",
            {
                "master": _str("Spark master of each worker's session. Unset: local[N], N the cores the worker is "
                               "given (on Kubernetes the spark container's CPU limit, else its request, rounded up; "
                               "with ftpipeline run the machine's cores divided among the workers)."),
                "conf": {
                    "type": "object",
                    "description": "Extra Spark configuration.",
                    "additionalProperties": {"type": "string"},
                },
                "maxInMemoryBytes": _int(
                    "Largest task input whose result Spark returns to the worker's process as one table; a "
                    "larger task has Spark write its result as files, read back a batch at a time, so a step "
                    "larger than the driver's memory runs. 0: every task goes through files.",
                    minimum=0, default=DEFAULT_MAX_IN_MEMORY_BYTES),
                "resources": _RESOURCES,
            },
        ),
        "sidecar": _obj("The runtime sidecar container of each worker pod.", {"resources": _RESOURCES}),
        "volumes": {
            "type": "array", "maxItems": 32,
            "description": "Pod volumes of every worker (output, checkpoints, dead letters), as in a Pod "
                           "(ignored by ftpipeline run).",
            "items": {"type": "object", "description": "A Pod volume (hostPath, persistentVolumeClaim, ...).",
                      "x-kubernetes-preserve-unknown-fields": True},
        },
        "volumeMounts": {
            "type": "array", "maxItems": 32,
            "description": "Where both containers of a worker mount spec.volumes (ignored by ftpipeline run).",
            "items": _obj("A volume mount.", {
                "name": _str("Name of a volume in spec.volumes.", minLength=1),
                "mountPath": _str("Absolute path in the containers.", minLength=1),
                "subPath": _str("Path within the volume."),
                "readOnly": _bool("Mount read-only.", False),
            }, ["name", "mountPath"]),
        },
        "serviceAccountName": _str("Service account of the worker pods (ignored by ftpipeline run)."),
        "tls": _obj("Credentials of the workers' mutual TLS (ignored by ftpipeline run, which issues its own).", {
            "secretName": _str(
                "A Secret of this namespace with ca.crt, tls.crt and tls.key (a kubernetes.io/tls Secret as "
                "cert-manager writes it) whose certificate is signed by ca.crt and names ftpipeline-worker; "
                "every worker presents it and trusts only ca.crt. Unset: the operator issues a CA of the "
                "pipeline's own on every run.", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", maxLength=253),
        }),
        "deadLetter": _obj(
            "Where malformed records go.",
            {"path": _str("Directory; relative paths are resolved against the pipeline file.", minLength=1)},
            ["path"],
        ),
        "stages": {"type": "array", "description": "The dataflow.", "minItems": 1, "maxItems": 64,
                   "items": STAGE_SCHEMA,
                   # what the object alone decides is decided at admission (cycles too, by the loader;
                   # the API server's CEL has no recursion to find them)
                   "x-kubernetes-validations": [
                       rule("self.all(s, self.exists_one(t, t.name == s.name))", UNIQUE_STAGES),
                       rule("self.all(s, !has(s.inputs) || s.inputs.all(i, self.exists(t, t.name == i.stage)))",
                            KNOWN_INPUTS),
                   ]},
    },
    ["entryPoint", "workers", "stages"],
    rules=[rule("!has(self.recovery) || !has(self.recovery.strategy) || self.recovery.strategy != 'checkpoint' || "
                "((!has(self.faultTolerance) || self.faultTolerance) && (!has(self.checkpoint) || "
                "(!has(self.checkpoint.intervalSteps) && !has(self.checkpoint.intervalMs)))) || "
                "(has(self.checkpoint) && ((has(self.checkpoint.intervalSteps) && self.checkpoint.intervalSteps > 0) "
                "|| (has(self.checkpoint.intervalMs) && self.checkpoint.intervalMs > 0)))",
                "recovery.strategy checkpoint needs checkpoints: checkpoint.intervalSteps or intervalMs above 0, "
                "or neither set (the default interval)")],
)

PHASES = ["Pending", "Starting", "Running", "Recovering", "Paused", "Retrying", "Suspended", "Succeeded", "Failed"]
CONDITIONS = ["Ready", "Progressing", "Degraded", "Stalled", "Paused", "CheckpointFailing", "Failed"]

_TIME = {"type": "string", "format": "date-time"}

STATUS_SCHEMA: Schema = _obj(
    "Observed state, written by the operator.",
    {
        "phase": _str("Where the pipeline is in its life.", enum=PHASES),
        "message": _str("Why the pipeline is in this phase, for people."),
        "observedGeneration": _int("The spec generation this status describes."),
        "step": _int("Newest step started."),
        "committedStep": _int("Newest step whose output is released (exactly once)."),
        "lastCheckpoint": _obj("The newest committed checkpoint (the resume point).", {
            "epoch": _int("Checkpoint number."),
            "step": _int("The step the checkpoint's cut follows."),
            "time": {**_TIME, "description": "When it was committed."},
            "seconds": {"type": "number", "description": "How long taking it took."},
        }),
        "recoveries": _int("Recoveries since the pipeline was created."),
        "attempt": _int("The run's current attempt: a failed run is tried again within spec.recovery.restartBudget."),
        "lastFailure": _obj("The newest failed attempt.", {
            "attempt": _int("Which attempt failed."),
            "message": _str("Why, in one line (the path, the errno, the worker)."),
            "time": {**_TIME, "description": "When it failed."},
        }),
        "lastRecovery": _obj("The newest recovery.", {
            "strategy": _str("How it recovered: lineage (the lost work re-run on the survivors), checkpoint "
                             "(every worker rolled back to the newest checkpoint) or restart (no worker survived: "
                             "a new set started from the newest checkpoint).",
                             enum=["lineage", "checkpoint", "restart"]),
            "worker": _str("The lost worker."),
            "reason": _str("Why the worker was lost (Deleted, OOMKilled, Evicted, ApplicationError, ...)."),
            "seconds": {"type": "number", "description": "From the loss to the recovery plan applied."},
            "time": {**_TIME, "description": "When the loss was detected."},
        }),
        "workers": _obj("Workers of the current run.", {
            "ready": _int("Workers that joined and run tasks."),
            "total": _int("Workers the spec asks for."),
        }),
        "conditions": {
            "type": "array", "description": "Ready, Progressing, Degraded, Stalled and Failed, as in other workloads; "
                                      "Paused while Redis or ZooKeeper is out of reach.",
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
            "items": _obj("One condition.", {
                "type": _str("Condition type.", enum=CONDITIONS),
                "status": _str("True, False or Unknown.", enum=["True", "False", "Unknown"]),
                "reason": _str("CamelCase reason."),
                "message": _str("For people."),
                "lastTransitionTime": {**_TIME, "description": "When status last changed."},
                "observedGeneration": _int("The spec generation it was set for."),
            }, ["type", "status"]),
        },
    },
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
