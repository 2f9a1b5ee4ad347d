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
in step. The cross-field CEL rules are rendered away too: the admission
webhook evaluates them with the loader, naming the stage (``spec/crd.py``
says why).

The parts: the node builders (``nodes.py``) and a stage's schema
(``stage_schema.py``); the spec, the status and the object are here.

Checks a structural schema cannot express (exactly one stage kind, known
stage references, no cycles, an entry point that exists) live in
``ftpipeline.spec.load`` and report the same ``spec.x.y`` field paths.
"""

from __future__ import annotations

from ftpipeline.spec.cel import rule
from ftpipeline.spec.nodes import (
    FUNCTION_PATTERN,
    NAME_PATTERN,
    RESOURCES,
    SECRET_REF,
    Schema,
    boolean,
    either,
    integer,
    obj,
    string,
)
from ftpipeline.spec.placement_schema import PLACEMENT_FIELDS
from ftpipeline.spec.stage_schema import MAX_PARALLELISM, STAGE_SCHEMA

# What one pipeline may ask for, so that no spec can exhaust the operator or the lineage store before
# anything runs (checked by the CRD at admission and by the runtime's validation, spec/load.py);
# MAX_PARALLELISM, the channels of one stage, is the stage schema's (stage_schema.py).
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

SPEC_SCHEMA: Schema = obj(
    "Desired state of a fault-tolerant pipeline.",
    {
        "image": string("Container image holding the runtime and the entry point (ignored by ftpipeline run). "
                      "Default: the operator's own image.", minLength=1),
        "imagePullPolicy": string("When the kubelet pulls the image. Default: IfNotPresent, or the operator's own "
                                "policy when the image is the operator's.", enum=["Always", "IfNotPresent", "Never"]),
        "entryPoint": string(
            "Python module with the pipeline's functions: a file path (relative to the pipeline "
            "file) or a dotted module name importable by the workers.",
            minLength=1,
        ),
        "workers": {**integer("Number of workers (each a Spark process plus a runtime sidecar).", minimum=1),
                    "maximum": MAX_WORKERS},
        "faultTolerance": boolean("Keep lineage and buffered objects so a lost worker is recovered (default true). "
                                "Off only for measuring its cost: a lost worker then fails the run.", True),
        "chaining": boolean("Run neighbouring stages joined one-to-one (a forward edge that is the upstream's only "
                          "output and the downstream's only input; the downstream a transform or a sink) as one "
                          "task and one Spark job, as Flink chains operators (default true). Lineage is then kept "
                          "at the chains' boundaries. Off: every stage is a task of its own.", True),
        "reusePlans": boolean("Build each chain's Spark plan once per worker and input schema, and run it on every "
                            "step's rows, as Structured Streaming runs a query's plan on each micro-batch (default "
                            "true). The pipeline's functions are then called once, not per step, so they must "
                            "describe a transformation and not act per call. Off: they are called for every task.",
                            True),
        "suspend": boolean("Stop the workers and keep the pipeline's state (Redis, checkpoints, output). Setting it "
                         "back to false resumes from the newest checkpoint and the step log.", False),
        "checkpointNonce": string("Change this value (any string) to take a checkpoint now."),
        "restartNonce": string("Change this value (any string) to restart every worker; the pipeline resumes from "
                             "its newest checkpoint with no lost or repeated step."),
        "restoreFrom": obj(
            "Restore the pipeline from one of its committed checkpoints: setting (or changing) this stops the run "
            "and resumes it from that checkpoint; checkpoints committed after it are deleted, and the steps after "
            "it run again with the offsets they were first read with (the sinks drop what they already released). "
            "Kubernetes only: ftpipeline run has --from-checkpoint.",
            {
                "checkpoint": string("The FTPipelineCheckpoint's name (in this namespace, of this pipeline, "
                                     "Committed).", minLength=1),
                "nonce": string("Change this value (any string) to restore from the same checkpoint again."),
            },
            ["checkpoint"],
        ),
        "upgrade": obj(
            "How a change to a running pipeline's spec (image, code, resources, parallelism, any field but "
            "suspend and the nonces) is applied: the run is stopped and the new spec started, and if the new "
            "spec commits no step in time, the last stable spec is started again.",
            {
                "mode": string("checkpoint: a checkpoint is taken, then the run stops and the new spec resumes "
                             "from it (nothing lost, nothing repeated). stateless: the run stops at once and the "
                             "new spec starts over as a new run (empty state, the sources from their starting "
                             "offsets, the sinks' output as spec.existingOutput says).",
                             enum=["checkpoint", "stateless"], default="checkpoint"),
                "healthDeadlineSeconds": integer("Seconds the upgraded spec has to commit its first step.",
                                                 minimum=1, default=300),
                "rollback": boolean("Start the last stable spec again, from the same checkpoint, when the "
                                  "upgraded spec misses its deadline, cannot run, or spends its restart budget. "
                                  "The object's spec is left as written; status.lifecycleState is RolledBack.",
                                  True),
            },
        ),
        "progressDeadlineSeconds": integer("Seconds without a committed step after which the pipeline is reported "
                                        "Stalled (condition Stalled, an Event).", minimum=1, default=600),
        "steps": obj(
            "How steps are triggered.",
            {
                "mode": string("lockstep: step S+1 starts when step S is committed. pipelined: up to `window` "
                             "steps run at once; checkpoints stay consistent through vector clocks.",
                             enum=["lockstep", "pipelined"], default="lockstep"),
                "window": integer("pipelined: how many uncommitted steps may be in flight.", minimum=1, default=3),
                "maxSteps": integer("Stop after this many committed steps (default: run until the input ends).", minimum=1),
                "trigger": obj(
                    "Trigger reasons: records arrived across workers, a timer after the first record, a clock tick.",
                    {
                        "records": integer("Start a step once this many records are available across workers.", minimum=1, default=1),
                        "timerMs": integer("Start a step this long after the first record even if fewer arrived.", minimum=0, default=100),
                        "tickMs": integer("Start a step at least this often, even with no records (0: off).", minimum=0, default=0),
                    },
                ),
            },
        ),
        "recovery": obj(
            "What happens when a worker is lost.",
            {
                "strategy": string(
                    "lineage: recompute only the lost work (a lost stateful channel restores its newest snapshot "
                    "and replays what it consumed since). checkpoint: every worker reopens the newest committed "
                    "checkpoint and sources replay from its offsets. auto: lineage where the lost work is stateless, "
                    "or its state has a snapshot and its inputs since are alive; checkpoint otherwise.",
                    enum=["lineage", "checkpoint", "auto"], default="lineage"),
                "heartbeatTimeoutMs": {**integer(
                    "A worker that does not answer ZooKeeper for this long (hung, stopped, cut off) loses its "
                    "heartbeat and is recovered like a deleted one. The ZooKeeper server bounds it to between "
                    "2 and 20 of its ticks.", minimum=1000, default=6000), "maximum": 600000},
                "restartBudget": obj(
                    "How many lost workers are replaced before the pipeline fails (like a Job's backoffLimit).",
                    {
                        "maxRestarts": integer("Replacements allowed within windowSeconds.", minimum=0, default=5),
                        "windowSeconds": integer("The sliding window the budget is counted in.", minimum=1, default=600),
                    },
                ),
                "backoff": obj(
                    "Delay before a replacement worker starts; recovery on the survivors never waits for it.",
                    {
                        "initialMs": integer("Delay before the first replacement in the window.", minimum=0, default=1000),
                        "maxMs": integer("The delay doubles with each loss in the window up to this.", minimum=0,
                                      default=60000),
                        "jitterPercent": {**integer("Random spread of each delay, in percent.", minimum=0, default=20),
                                          "maximum": 100},
                    },
                    rules=[rule("!has(self.initialMs) || !has(self.maxMs) || self.maxMs >= self.initialMs",
                                "maxMs must be at least initialMs")],
                ),
            },
        ),
        "checkpoint": obj(
            "Consistent checkpoints: snapshots of stateful channels, committed in ZooKeeper as the resume point.",
            {
                "intervalSteps": integer("Checkpoint once this many steps passed since the last committed checkpoint (0: not by "
                                      "steps). When neither interval is set, a fault-tolerant pipeline checkpoints every "
                                      f"{DEFAULT_CHECKPOINT_STEPS} steps; setting both to 0 turns checkpoints off, and "
                                      "buffers, lineage tables and recovery work then grow with the run.", minimum=0),
                "intervalMs": integer("Checkpoint at least this often, in milliseconds (0: not by time).", minimum=0),
                "retain": integer("How many committed checkpoints to keep (older ones are deleted). The step log "
                                  "is kept back to the oldest of them, so any of them restores exactly.",
                                  minimum=1, default=2),
                "maxAgeSeconds": integer("Also delete a kept checkpoint once it is this old (0: by count only). The "
                                         "newest is never deleted, nor one an FTPipelineCheckpoint asked for.",
                                         minimum=0, default=0),
                "storage": obj(
                    "Where snapshots and in-flight messages are written (shared by all workers).",
                    {"path": string("A directory (relative paths are resolved against the pipeline file), or "
                                    "s3://bucket/prefix on an S3-compatible object store, whose endpoint and keys "
                                    "come from the environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
                                    "AWS_SECRET_ACCESS_KEY, AWS_REGION); ftpipeline run starts a private store "
                                    "when no endpoint is set.", minLength=1)},
                    ["path"],
                ),
            },
        ),
        "state": obj(
            "Where stateful stages keep their per-key state.",
            {
                "backend": string("rocksdb: an embedded RocksDB per stateful channel on the worker's disk (state larger "
                                "than memory, a step costs what it touches, incremental checkpoints). memory: one "
                                "Arrow table in the Spark process (tiny state, tests).",
                                enum=["rocksdb", "memory"], default="rocksdb"),
            },
        ),
        "zookeeper": obj(
            "Where the command log, the workers' heartbeats and committed checkpoints are kept. Empty: "
            "ftpipeline run starts a private ZooKeeper; the operator uses its own default.",
            {"connect": string("ZooKeeper connect string, host:port[,host:port...]; digest://user:password@hosts "
                             "authenticates; a ?ca=/path/ca.crt suffix connects over TLS trusting that CA."),
             "secretRef": SECRET_REF},
            rules=[either("connect", "secretRef")],
        ),
        "kafka": obj(
            "The Kafka cluster of the pipeline's Kafka sources and sinks.",
            {"bootstrapServers": string(
                "host:port[,host:port...] (plaintext); ssl://hosts?ca=/path/ca.crt connects over TLS trusting that "
                "CA (else the system's); sasl-ssl://user:password@hosts?mechanism=SCRAM-SHA-512&ca=/path/ca.crt "
                "(or sasl-plaintext://) authenticates, PLAIN unless a mechanism is given. Empty: ftpipeline run "
                "starts a private broker; the operator uses its own default (the chart's kafka.enabled)."),
             "secretRef": {**SECRET_REF, "description": "A key of a Secret of the pipeline's namespace holding the "
                           "endpoint (as bootstrapServers, credentials included): given to the workers, never "
                           "written into their pods (ignored by ftpipeline run)."},
             "caSecretRef": {**SECRET_REF, "description": "A key of a Secret of the pipeline's namespace holding "
                             "the PEM CA the workers trust for ssl:// and sasl-ssl:// endpoints that name no ?ca= "
                             "(ignored by ftpipeline run: set FTPIPELINE_KAFKA_CA)."}},
            rules=[either("bootstrapServers", "secretRef")],
        ),
        "objectStore": obj(
            "The S3-compatible store of the pipeline's s3:// locations (checkpoint.storage.path, Parquet sink "
            "paths). Empty: the operator's (the chart's objectStore.enabled), which gives the pipeline keys of "
            "its own and the buckets its locations name; ignored by ftpipeline run, which reads the environment.",
            {"secretRef": obj("A Secret of the pipeline's namespace whose keys become the workers' environment: "
                              "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and AWS_ENDPOINT_URL, AWS_REGION, "
                              "AWS_SESSION_TOKEN and FTPIPELINE_S3_PATH_STYLE where the store needs them (never "
                              "written into the pods).", {"name": string("Secret name.", minLength=1)}, ["name"]),
             "caSecretRef": {**SECRET_REF, "description": "A key of a Secret of the pipeline's namespace holding "
                             "the PEM CA the workers trust for an https endpoint of a private CA."}},
            ["secretRef"],
        ),
        "gc": obj(
            "Garbage collection of consumed objects.",
            {"intervalMs": integer("How often a worker drops consumed objects.", minimum=10, default=500)},
        ),
        "redis": obj(
            "Lineage store. Empty: ftpipeline run starts a private Redis; the operator uses its own default.",
            {"url": string("redis://, unix:// or (TLS) rediss:// URL; rediss://...?ssl_ca_certs=/path/ca.crt trusts "
                         "that CA."), "secretRef": SECRET_REF},
            rules=[either("url", "secretRef")],
        ),
        "spark": obj(
            "Spark session of each worker.",
            {
                "master": string("Spark master of each worker's session. Unset: local[N], N the cores the worker is "
                               "given (on Kubernetes the spark container's CPU limit, else its request, rounded up; "
                               "with ftpipeline run the machine's cores divided among the workers)."),
                "conf": {
                    "type": "object",
                    "description": "Extra Spark configuration.",
                    "additionalProperties": {"type": "string"},
                },
                "maxInMemoryBytes": integer(
                    "Largest task input whose result Spark returns to the worker's process as one table; a "
                    "larger task has Spark write its result as files, read back a batch at a time, so a step "
                    "larger than the driver's memory runs. 0: every task goes through files.",
                    minimum=0, default=DEFAULT_MAX_IN_MEMORY_BYTES),
                "resources": RESOURCES,
            },
        ),
        "sidecar": obj("The runtime sidecar container of each worker pod.", {"resources": RESOURCES}),
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
            "items": obj("A volume mount.", {
                "name": string("Name of a volume in spec.volumes.", minLength=1),
                "mountPath": string("Absolute path in the containers.", minLength=1),
                "subPath": string("Path within the volume."),
                "readOnly": boolean("Mount read-only.", False),
            }, ["name", "mountPath"]),
        },
        "serviceAccountName": string("Service account of the worker pods (ignored by ftpipeline run)."),
        **PLACEMENT_FIELDS,
        "tls": obj("Credentials of the workers' mutual TLS (ignored by ftpipeline run, which issues its own).", {
            "secretName": string(
                "A Secret of this namespace with ca.crt, tls.crt and tls.key (a kubernetes.io/tls Secret as "
                "cert-manager writes it) whose certificate is signed by ca.crt and names ftpipeline-worker; "
                "every worker presents it and trusts only ca.crt. Unset: the operator issues a CA of the "
                "pipeline's own on every run.", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", maxLength=253),
        }),
        "deadLetter": obj(
            "Where malformed records go.",
            {"path": string("A directory (relative paths are resolved against the pipeline file), or "
                            "s3://bucket/prefix (see checkpoint.storage.path).", minLength=1)},
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

LIFECYCLE = ["Created", "Deploying", "Running", "Upgrading", "RolledBack", "Suspended", "Succeeded", "Failed"]
PHASES = ["Pending", "Starting", "Running", "Recovering", "Paused", "Retrying", "Suspended", "Succeeded", "Failed"]
CONDITIONS = ["Ready", "Progressing", "Degraded", "Stalled", "Paused", "CheckpointFailing", "Nondeterministic",
              "EventTimeDegraded", "Failed"]

_TIME = {"type": "string", "format": "date-time"}

STATUS_SCHEMA: Schema = obj(
    "Observed state, written by the operator.",
    {
        "phase": string("Where the pipeline is in its life.", enum=PHASES),
        "message": string("Why the pipeline is in this phase, for people."),
        "observedGeneration": integer("The spec generation this status describes."),
        "lifecycleState": string("Where the pipeline's spec is in its life: Created, Deploying (not yet a "
                                 "committed step), Running (this spec is stable), Upgrading, RolledBack (the "
                                 "last stable spec runs in place of the one written), Suspended, Succeeded, "
                                 "Failed.", enum=LIFECYCLE),
        "stableSpec": obj("The newest spec that committed a step: what a rollback runs. The spec itself is in "
                          "the ConfigMap named here, which the pipeline owns.", {
            "digest": string("A digest of the stable spec (the fields that decide what runs)."),
            "generation": integer("The generation of the FTPipeline that spec was."),
            "configMap": string("The ConfigMap whose spec.json holds it."),
        }),
        "lastStableSpec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                           "description": "Deprecated: the whole stable spec, as older operators kept it; read "
                                          "once, then removed in favour of stableSpec."},
        "upgrade": obj("The newest upgrade's outcome.", {
            "result": string("Upgraded or RolledBack.", enum=["Upgraded", "RolledBack"]),
            "failedSpec": string("A digest of the spec that was rolled back from (while the object still asks "
                                 "for it, the last stable spec runs)."),
            "message": string("Why it was rolled back."),
        }),
        "lastRestore": obj("The newest restore from a named checkpoint (spec.restoreFrom).", {
            "checkpoint": string("The FTPipelineCheckpoint restored from."),
            "nonce": string("spec.restoreFrom.nonce when it was done."),
            "epoch": integer("Its checkpoint number."),
            "step": integer("The step it follows."),
            "result": string("Restoring (under way; left so when the operator restarted meanwhile, and then not "
                             "asked again: change spec.restoreFrom.nonce to), Restored, or Refused (the run went "
                             "on from its newest checkpoint).", enum=["Restoring", "Restored", "Refused"]),
            "message": string("Why it was refused."),
            "time": {**_TIME, "description": "When."},
        }),
        "step": integer("Newest step started."),
        "committedStep": integer("Newest step whose output is released (exactly once)."),
        "eventTime": obj("Event time, when a source declares it: where the watermark stands.", {
            "watermark": string("The newest step's watermark (RFC 3339), or end-of-input once every window is "
                                "final."),
            "lagSeconds": {"type": "number", "description": "How far the watermark is behind the newest event time "
                                                            "the sources read."},
        }),
        "lastCheckpoint": obj("The newest committed checkpoint (the resume point).", {
            "epoch": integer("Checkpoint number."),
            "step": integer("The step the checkpoint's cut follows."),
            "time": {**_TIME, "description": "When it was committed."},
            "seconds": {"type": "number", "description": "How long taking it took."},
        }),
        "recoveries": integer("Recoveries since the pipeline was created."),
        "attempt": integer("The run's current attempt: a failed run is tried again within spec.recovery.restartBudget."),
        "lastFailure": obj("The newest failed attempt.", {
            "attempt": integer("Which attempt failed."),
            "message": string("Why, in one line (the path, the errno, the worker)."),
            "time": {**_TIME, "description": "When it failed."},
        }),
        "lastRecovery": obj("The newest recovery.", {
            "strategy": string("How it recovered: lineage (the lost work re-run on the survivors), checkpoint "
                             "(every worker rolled back to the newest checkpoint) or restart (no worker survived: "
                             "a new set started from the newest checkpoint).",
                             enum=["lineage", "checkpoint", "restart"]),
            "worker": string("The lost worker."),
            "reason": string("Why the worker was lost (Deleted, OOMKilled, Evicted, ApplicationError, ...)."),
            "seconds": {"type": "number", "description": "From the loss to the recovery plan applied."},
            "time": {**_TIME, "description": "When the loss was detected."},
        }),
        "lastEvacuation": obj("The newest worker that was evicted (a drain) and handed its channels over.", {
            "worker": string("The evicted worker."),
            "seconds": {"type": "number", "description": "From its snapshot's report to its channels moved."},
            "time": {**_TIME, "description": "When its channels moved."},
        }),
        "workers": obj("Workers of the current run.", {
            "ready": integer("Workers that joined and run tasks."),
            "total": integer("Workers the spec asks for."),
        }),
        "conditions": {
            "type": "array", "description": "Ready, Progressing, Degraded, Stalled and Failed, as in other workloads; "
                                      "Paused while Redis or ZooKeeper is out of reach.",
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
            "items": obj("One condition.", {
                "type": string("Condition type.", enum=CONDITIONS),
                "status": string("True, False or Unknown.", enum=["True", "False", "Unknown"]),
                "reason": string("CamelCase reason."),
                "message": string("For people."),
                "lastTransitionTime": {**_TIME, "description": "When status last changed."},
                "observedGeneration": integer("The spec generation it was set for."),
            }, ["type", "status"]),
        },
    },
)

FTPIPELINE_SCHEMA: Schema = obj(
    "A fault-tolerant PySpark pipeline.",
    {
        "apiVersion": string("Must be ftpipeline.io/v1alpha1.", enum=[f"{API_GROUP}/{API_VERSION}"]),
        "kind": string("Must be FTPipeline.", enum=[KIND]),
        "metadata": {
            "type": "object",
            "description": "Standard object metadata.",
            "properties": {"name": string("Pipeline name (DNS label).", pattern=NAME_PATTERN, maxLength=40)},
            "required": ["name"],
        },
        "spec": SPEC_SCHEMA,
    },
    ["apiVersion", "kind", "metadata", "spec"],
)


__all__ = ["API_GROUP", "API_VERSION", "CONDITIONS", "DEFAULT_CHECKPOINT_STEPS", "DEFAULT_MAX_IN_MEMORY_BYTES",
           "FTPIPELINE_SCHEMA", "FUNCTION_PATTERN", "KIND", "LIFECYCLE", "KNOWN_INPUTS", "MAX_CHANNELS", "MAX_OBJECTS_PER_STEP",
           "MAX_PARALLELISM", "MAX_WORKERS", "NAME_PATTERN", "PHASES", "PLURAL", "SPEC_SCHEMA", "STAGE_SCHEMA",
           "STATUS_SCHEMA", "UNIQUE_STAGES", "Schema"]
