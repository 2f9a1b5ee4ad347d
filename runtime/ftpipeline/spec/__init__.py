"""The FTPipeline document: schema, typed model and loader (public)."""

from ftpipeline.spec.load import Problem, SpecError, load_entry_module, load_pipeline, parse_pipeline
from ftpipeline.spec.model import Edge, Partition, PipelineSpec, StageKind, StageSpec

__all__ = [
    "Edge",
    "Partition",
    "PipelineSpec",
    "Problem",
    "SpecError",
    "StageKind",
    "StageSpec",
    "load_entry_module",
    "load_pipeline",
    "parse_pipeline",
]
