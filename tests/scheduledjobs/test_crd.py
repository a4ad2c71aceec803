"""crds/scheduledjob.yaml: generated from the JobSpec, served and enforced by an API
server as the contract says, valid for the Kubernetes versions we support."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kube import emulator, manifests
from kube.status import ApiError

from tickwork.core.spec import JobSpec
from tickwork.operator import crd

from .conftest import EXAMPLES, example, scheduled_job

CRD_FILE = Path(__file__).resolve().parents[2] / crd.PATH


def spec_properties() -> dict[str, Any]:
    schema = crd.definition()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(schema["properties"]["spec"]["properties"])


def test_the_crd_file_is_what_make_crds_writes() -> None:
    assert CRD_FILE.read_text("utf-8") == crd.render(), (
        "crds/scheduledjob.yaml is stale: run `make crds`"
    )


def test_the_crd_is_valid_for_the_oldest_and_newest_supported_kubernetes() -> None:
    assert manifests.validate_file(CRD_FILE) == 1
    for path in sorted(EXAMPLES.glob("*.yaml")):
        # Custom resources are not in the offline schemas; their own CRD checks them.
        assert yaml.safe_load(path.read_text())["apiVersion"] == "tickwork.dev/v1alpha1"


def test_names_scope_and_printer_columns_are_the_contracts() -> None:
    spec = crd.definition()["spec"]
    assert crd.definition()["metadata"]["name"] == "scheduledjobs.tickwork.dev"
    assert (spec["group"], spec["scope"]) == ("tickwork.dev", "Namespaced")
    assert spec["names"] == {
        "kind": "ScheduledJob",
        "listKind": "ScheduledJobList",
        "plural": "scheduledjobs",
        "singular": "scheduledjob",
        "shortNames": ["sj"],
        "categories": ["tickwork"],
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    assert [
        (c["name"].upper(), c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]
    ] == [
        ("SCHEDULE", "string", ".spec.schedule.cron"),
        ("ZONE", "string", ".spec.schedule.timeZone"),
        ("PAUSED", "boolean", ".spec.paused"),
        ("READY", "string", '.status.conditions[?(@.type=="Ready")].status'),
        ("NEXT", "string", ".status.nextRunTime"),
        ("LAST", "date", ".status.lastScheduleTime"),
        ("RESULT", "string", ".status.lastRunState"),
        ("JOB", "string", ".status.lastJobName"),
        ("AGE", "date", ".metadata.creationTimestamp"),
    ]


def _walk(model: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """pydantic's schema of a model, references resolved and Optional unwrapped."""
    if "$ref" in model:
        model = {**defs[model["$ref"].rsplit("/", 1)[-1]], **model}
    for variant in model.get("anyOf", []):
        if variant.get("type") != "null":
            inner = _walk(variant, defs)
            return {**inner, **{k: v for k, v in model.items() if k != "anyOf"}}
    return model


@pytest.mark.parametrize("path", [(), ("schedule",), ("retry",)], ids=["spec", "schedule", "retry"])
def test_the_spec_schema_agrees_with_the_job_spec_field_for_field(path: tuple[str, ...]) -> None:
    model = JobSpec.model_json_schema(by_alias=True)
    defs = model["$defs"]
    node, schema = model, {"properties": spec_properties()}
    for step in path:
        node = _walk(node["properties"][step], defs)
        schema = schema["properties"][step]
    assert set(schema["properties"]) == set(node["properties"])
    for name, field in node["properties"].items():
        field = _walk(field, defs)
        served = schema["properties"][name]
        assert served.get("description"), f"{name} has no description for kubectl explain"
        assert served["description"] == " ".join(field["description"].split())
        if field.get("default") is not None and not isinstance(field["default"], dict):
            assert served["default"] == field["default"], name
        for bound in ("minimum", "maximum", "enum", "maxLength", "pattern", "format"):
            assert served.get(bound) == field.get(bound), (name, bound)
    assert schema.get("required", []) == node.get("required", [])


async def test_an_api_server_applies_the_defaults_bounds_and_cel_rules(
    cluster_kube: emulator.Emulator,
) -> None:
    stored = await cluster_kube.create(scheduled_job("minimal", schedule={"cron": "0 * * * *"}))
    spec = stored["spec"]
    assert JobSpec.model_validate(spec).to_document() == spec  # what the model would store
    assert (spec["queue"], spec["priority"], spec["paused"], spec["dryRun"]) == (
        "default",
        "default",
        False,
        False,
    )
    assert spec["retry"] == {"maxAttempts": 3, "baseSeconds": 30, "maxSeconds": 1800}
    assert spec["schedule"]["jitterSeconds"] == 60

    refused = {
        "schedule and runAt": (
            {"schedule": {"cron": "* * * * *"}, "runAt": "2030-01-01T00:00:00Z"},
            "a job has at most one of schedule and runAt",
        ),
        "retry bounds": ({"retry": {"maxSeconds": 5}}, "retry.maxSeconds must be at least"),
        "priority": ({"priority": "urgent"}, "spec.priority"),
        "jitter": ({"schedule": {"cron": "* * * * *", "jitterSeconds": 4000}}, "jitterSeconds"),
        "queue": ({"queue": "Billing"}, "spec.queue"),
        "runAt format": ({"runAt": "tomorrow"}, "spec.runAt"),
        "pauseAfterFailures": ({"pauseAfterFailures": 0}, "spec.pauseAfterFailures"),
        "pauseAfterFailures type": ({"pauseAfterFailures": "3"}, "spec.pauseAfterFailures"),
    }
    for label, (body, message) in refused.items():
        with pytest.raises(ApiError) as raised:
            await cluster_kube.create(scheduled_job("refused", **body))
        assert raised.value.code == 422, label
        assert message in str(raised.value), label
    assert cluster_kube.get("sj", "refused", "default") is None


async def test_every_example_is_accepted_as_written(cluster_kube: emulator.Emulator) -> None:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        created = await cluster_kube.create(example(path.stem))
        JobSpec.model_validate(created["spec"])  # the served object is a valid JobSpec


def test_every_field_a_user_reads_is_described_for_kubectl_explain() -> None:
    schema = crd.definition()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    missing: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        if not node.get("description"):
            missing.append(path)
        for name, child in (node.get("properties") or {}).items():
            if path == "status" and name == "kopf":
                continue  # the operator's own bookkeeping
            walk(child, f"{path}.{name}")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    for top in ("spec", "status"):
        walk(schema["properties"][top], top)
    assert missing == []
