"""The last stable spec lives in a ConfigMap the pipeline owns; the status only names it."""

from __future__ import annotations

from typing import Any

import jsonschema
from kubernetes.client.exceptions import ApiException

from ftpipeline.spec.schema import STATUS_SCHEMA
from ftpipeline_operator import stable
from ftpipeline_operator.upgrades import Upgrades, spec_digest


class ConfigMaps:
    """The ConfigMap calls of CoreV1Api the module makes, over a dict (the verbs the chart's Role grants)."""

    def __init__(self) -> None:
        self.maps: dict[tuple[str, str], dict[str, Any]] = {}

    def create_namespaced_config_map(self, namespace: str, body: dict[str, Any]) -> None:
        key = (namespace, body["metadata"]["name"])
        if key in self.maps:
            raise ApiException(status=409, reason="AlreadyExists")
        self.maps[key] = body

    def patch_namespaced_config_map(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.maps[(namespace, name)]["data"].update(body["data"])

    def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
        if (namespace, name) not in self.maps:
            raise ApiException(status=404, reason="NotFound")
        return type("V1ConfigMap", (), {"data": self.maps[(namespace, name)]["data"]})()


def body(generation: int = 3, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "p", "uid": "u1", "generation": generation},
            "spec": {}, "status": status or {}}


SPEC = {"workers": 2, "image": "app:1", "stages": [{"name": "a", "parallelism": 2}]}


def test_a_stable_spec_is_written_to_an_owned_config_map_and_the_status_names_it() -> None:
    core = ConfigMaps()
    assert stable.write(core, body(), SPEC)  # type: ignore[arg-type]
    [(key, cm)] = core.maps.items()
    assert key == ("ns", "p-stable-spec") and cm["metadata"]["ownerReferences"][0]["uid"] == "u1"
    fields = stable.status_fields(body(), spec_digest(SPEC))
    assert fields == {"stableSpec": {"digest": spec_digest(SPEC), "generation": 3, "configMap": "p-stable-spec"},
                      "lastStableSpec": None}  # the whole copy an older operator left is removed
    jsonschema.validate({k: v for k, v in fields.items() if v is not None}, STATUS_SCHEMA)
    assert len(str(fields)) < 200  # describe shows a line, not the spec again
    assert stable.read(core, body(status=fields)) == SPEC  # type: ignore[arg-type]
    newer = {**SPEC, "image": "app:2"}
    assert stable.write(core, body(4), newer)  # type: ignore[arg-type]
    assert stable.read(core, body(status=stable.status_fields(body(4), spec_digest(newer)))) == newer  # type: ignore[arg-type]


def test_a_status_of_an_older_operator_is_still_read() -> None:
    assert Upgrades({"lastStableSpec": SPEC}, lambda: 0.0).stable == SPEC  # read where the lifecycle starts
    assert stable.read(None, body()) is None


def test_a_missing_or_mismatched_config_map_gives_no_stable_spec_rather_than_a_wrong_one() -> None:
    core = ConfigMaps()
    named = stable.status_fields(body(), spec_digest(SPEC))
    assert stable.read(core, body(status=named)) is None  # type: ignore[arg-type]
    stable.write(core, body(), {**SPEC, "image": "other"})  # type: ignore[arg-type]
    assert stable.read(core, body(status=named)) is None  # type: ignore[arg-type]


def test_a_refused_write_is_logged_not_raised() -> None:
    class Refusing(ConfigMaps):
        def create_namespaced_config_map(self, namespace: str, body: dict[str, Any]) -> None:
            raise ApiException(status=403, reason="Forbidden")

    assert not stable.write(Refusing(), body(), SPEC)  # type: ignore[arg-type]
