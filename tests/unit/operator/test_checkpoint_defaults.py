"""On Kubernetes the default checkpoints need a storage path every worker shares: without one they
stay off, and the run says so (a Warning Event naming the field), instead of failing each checkpoint
against the pipeline's read-only directory."""

from __future__ import annotations

from typing import Any

from ftpipeline.spec.schema import DEFAULT_CHECKPOINT_STEPS
from ftpipeline_operator.resolve import Defaults, checkpoints_off_warning, resolve_spec


def body(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline",
        "metadata": {"name": "clicks", "namespace": "data", "uid": "1234", "generation": 1},
        "spec": {"entryPoint": "/opt/app/clicks.py", "workers": 2,
                 "stages": [{"name": "s", "source": {"generator": {"function": "g", "rowsPerStep": 10}}},
                            {"name": "out", "inputs": [{"stage": "s"}], "sink": {"parquet": {"path": "/data/out"}}}],
                 **spec},
    }


def resolved(doc: dict[str, Any]) -> Any:
    return resolve_spec(doc, None, Defaults())  # type: ignore[arg-type]  # no secretRef: the API is not called


def test_with_shared_storage_the_default_interval_applies() -> None:
    doc = body(checkpoint={"storage": {"path": "/data/checkpoints"}})
    spec = resolved(doc)
    assert spec.checkpoint_steps == DEFAULT_CHECKPOINT_STEPS
    assert checkpoints_off_warning(doc["spec"], spec) is None


def test_without_storage_the_default_checkpoints_are_off_and_the_warning_names_the_field() -> None:
    doc = body()
    spec = resolved(doc)
    assert not spec.checkpoints_enabled
    warning = checkpoints_off_warning(doc["spec"], spec)
    assert warning is not None and warning.startswith("spec.checkpoint.storage.path is not set")


def test_an_explicit_opt_out_is_warned_about_as_such() -> None:
    doc = body(checkpoint={"intervalSteps": 0, "storage": {"path": "/data/checkpoints"}})
    warning = checkpoints_off_warning(doc["spec"], resolved(doc))
    assert warning is not None and warning.startswith("spec.checkpoint.intervalSteps and intervalMs are 0")


def test_an_explicit_interval_is_kept_as_before() -> None:
    doc = body(checkpoint={"intervalSteps": 4})
    assert resolved(doc).checkpoint_steps == 4


def test_no_warning_without_fault_tolerance() -> None:
    doc = body(faultTolerance=False)
    assert checkpoints_off_warning(doc["spec"], resolved(doc)) is None
