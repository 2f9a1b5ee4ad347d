"""The committed CRD files are the rendering of the one schema."""

from __future__ import annotations

from pathlib import Path

import yaml

from ftpipeline.spec.crd import checkpoint_crd, crd, render

ROOT = Path(__file__).resolve().parents[3]


def test_committed_crd_files_are_up_to_date() -> None:
    expected = render()
    for path in (ROOT / "crds" / "ftpipeline.yaml", ROOT / "charts" / "ftpipeline" / "files" / "ftpipeline-crd.yaml"):
        assert path.read_text() == expected, f"{path} is stale: run python -m ftpipeline.spec.crd > {path}"


def test_committed_checkpoint_crd_files_are_up_to_date() -> None:
    expected = render("checkpoint")
    for path in (ROOT / "crds" / "ftpipelinecheckpoint.yaml",
                 ROOT / "charts" / "ftpipeline" / "files" / "ftpipelinecheckpoint-crd.yaml"):
        assert path.read_text() == expected, f"{path} is stale: run python -m ftpipeline.spec.crd checkpoint > {path}"


def test_checkpoint_crd_lists_pipeline_state_step_and_size() -> None:
    doc = checkpoint_crd()
    version = doc["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert {c["name"] for c in version["additionalPrinterColumns"]} >= {"Pipeline", "State", "Step", "Bytes", "Age"}
    assert version["schema"]["openAPIV3Schema"]["properties"]["spec"]["required"] == ["pipeline"]


def test_crd_has_status_subresource_short_name_and_printer_columns() -> None:
    doc = crd()
    version = doc["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert "ftp" in doc["spec"]["names"]["shortNames"]
    assert {c["name"] for c in version["additionalPrinterColumns"]} >= {"Phase", "Step", "Age"}
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["required"] == ["entryPoint", "workers", "stages"]
    assert yaml.safe_load(render())["metadata"]["name"] == "ftpipelines.ftpipeline.io"


def test_the_peering_crd_the_chart_installs_is_the_one_in_crds() -> None:
    chart = ROOT / "charts" / "ftpipeline" / "files" / "kopf-peering-crd.yaml"
    assert (ROOT / "crds" / "kopf-peering.yaml").read_text() == chart.read_text()
    assert yaml.safe_load(chart.read_text())["spec"]["names"]["kind"] == "ClusterKopfPeering"

