"""The FTPipelineCheckpoint schema: a committed checkpoint as a Kubernetes object.

Why a resource of its own: people ask for a checkpoint (before a risky
change, a migration), list the ones they can go back to with their step and
size, and restore from one by name (``FTPipeline.spec.restoreFrom``), with
``kubectl`` and with what the Flink Kubernetes Operator taught them
(``FlinkStateSnapshot``). The operator also records every periodic
checkpoint it commits as one (``spec.alreadyExists``), and deletes those
records as retention deletes the checkpoints. One object's states::

    Pending    --the pipeline takes a checkpoint--> InProgress
    InProgress --it committed-->                    Committed (epoch, step, bytes)
    InProgress --aborted or not running, retries left--> Pending (after a backoff)
    InProgress --retries spent / no such pipeline / it ended--> Failed
    Committed  --retention deleted the checkpoint (periodic records only)--> (the object is deleted)
    Committed  --a restore from an older checkpoint deleted it--> Failed

A checkpoint someone asked for is kept by retention until its object is
deleted. The mechanics are the operator's (``ftpipeline_operator/snapshots.py``).
"""

from __future__ import annotations

from ftpipeline.spec.nodes import NAME_PATTERN, Schema, boolean, integer, obj, string

CHECKPOINT_KIND = "FTPipelineCheckpoint"
CHECKPOINT_PLURAL = "ftpipelinecheckpoints"
CHECKPOINT_STATES = ["Pending", "InProgress", "Committed", "Failed"]
DEFAULT_BACKOFF_LIMIT = 3

_TIME = {"type": "string", "format": "date-time"}

CHECKPOINT_SPEC: Schema = obj(
    "A checkpoint of an FTPipeline: one to take now, or one the operator recorded.",
    {
        "pipeline": string("The FTPipeline, in this namespace.", pattern=NAME_PATTERN, maxLength=40),
        "backoffLimit": integer("How many times a checkpoint that could not be taken (aborted, or the pipeline not "
                                "running yet) is tried again, with a doubling backoff, before Failed.",
                                minimum=0, default=DEFAULT_BACKOFF_LIMIT),
        "alreadyExists": boolean("Records a checkpoint that committed already (the operator's record of a periodic "
                                 "one) instead of asking for one.", False),
    },
    ["pipeline"],
)

CHECKPOINT_STATUS: Schema = obj(
    "Observed state, written by the operator.",
    {
        "state": string("Pending, InProgress, Committed or Failed.", enum=CHECKPOINT_STATES),
        "message": string("Why it failed, or what it waits for."),
        "epoch": integer("Checkpoint number (what a restore reopens)."),
        "step": integer("The step the checkpoint's cut follows."),
        "bytes": integer("What the checkpoint wrote to storage."),
        "seconds": {"type": "number", "description": "How long taking it took."},
        "failures": integer("Attempts that did not commit."),
        "pipelineUid": string("The uid of the pipeline it belongs to."),
        "triggeredAt": {**_TIME, "description": "When it was asked of the pipeline."},
        "committedAt": {**_TIME, "description": "When it was committed."},
    },
)

__all__ = ["CHECKPOINT_KIND", "CHECKPOINT_PLURAL", "CHECKPOINT_SPEC", "CHECKPOINT_STATES", "CHECKPOINT_STATUS",
           "DEFAULT_BACKOFF_LIMIT"]
