"""Custom resources validated against their CRD: structural schema, defaults, pruning, CEL."""

from __future__ import annotations

import copy
from typing import Any

import aiohttp

from kube import emulator, samples
from kube.test_emulator import MERGE, call


def causes(body: dict[str, Any]) -> dict[str, str]:
    assert body["reason"] == "Invalid", body
    return {c["field"]: c["message"] for c in body["details"]["causes"]}


async def test_types_required_enums_bounds_and_patterns(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    bad = samples.widget("a", "big", color="green", name="UPPER", tags=["a", "b", "c", "d"])
    code, body = await call(http, "POST", samples.WIDGETS, bad)
    assert code == 422
    found = causes(body)
    assert found["spec.size"] == (
        'Invalid value: "string": spec.size in body must be of type integer: "string"'
    )
    assert found["spec.color"] == 'Unsupported value: "green": supported values: "red", "blue"'
    assert (
        found["spec.name"] == "Invalid value: \"UPPER\": spec.name in body should match '^[a-z]+$'"
    )
    assert found["spec.tags"] == "Too many: 4: must have at most 3 items"
    assert body["message"].startswith('Widget.example.dev "a" is invalid: [')

    _, body = await call(http, "POST", samples.WIDGETS, samples.widget("a", 11))
    assert causes(body) == {
        "spec.size": "Invalid value: 11: spec.size in body should be less than or equal to 10"
    }
    _, body = await call(http, "POST", samples.WIDGETS, samples.widget("a", name="muchtoolong"))
    assert causes(body) == {"spec.name": "Too long: may not be more than 8 bytes"}
    no_size = samples.widget("a")
    del no_size["spec"]["size"]
    _, body = await call(http, "POST", samples.WIDGETS, no_size)
    assert causes(body) == {"spec.size": "Required value"}
    _, body = await call(http, "POST", samples.WIDGETS, samples.widget("a", runAt="tomorrow"))
    assert "spec.runAt" in causes(body)
    _, body = await call(http, "POST", samples.WIDGETS, samples.widget("a", tags=["x", "x"]))
    assert causes(body) == {"spec.tags[1]": 'Duplicate value: "x"'}
    assert widgets.objects("widgets") == []


async def test_defaults_applied_and_unknown_fields_pruned(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    body = samples.widget("a", unknown={"x": 1}, limits={}, extra={"free": {"form": True}})
    body["metadata"]["bogus"] = "dropped"
    body["topLevel"] = "dropped"
    code, created = await call(http, "POST", samples.WIDGETS, body)
    assert code == 201
    assert created["spec"] == {
        "size": 3,
        "color": "red",
        "limits": {"low": 1, "high": 5},
        "extra": {"free": {"form": True}},
    }
    assert "bogus" not in created["metadata"] and "topLevel" not in created
    _, status = await call(
        http,
        "PATCH",
        f"{samples.WIDGETS}/a/status",
        {"status": {"phase": "Ok", "kopf": {"progress": {"h": {"retries": 1}}}, "free": 1}},
        MERGE,
    )
    # status preserves unknown fields here, as the operator's bookkeeping needs.
    assert status["status"] == {
        "phase": "Ok",
        "kopf": {"progress": {"h": {"retries": 1}}},
        "free": 1,
    }


async def test_cel_rules_with_has_size_messages_and_field_paths(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    both = samples.widget("a", schedule={"cron": "* * * * *"}, runAt="2030-01-01T00:00:00Z")
    _, body = await call(http, "POST", samples.WIDGETS, both)
    assert causes(body) == {"spec": 'Invalid value: "object": schedule and runAt are exclusive'}
    _, body = await call(
        http, "POST", samples.WIDGETS, samples.widget("a", 1, tags=["a", "b", "c"])
    )
    assert causes(body) == {"spec.tags": 'Invalid value: "object": size 1 is too small for 3 tags'}
    _, body = await call(
        http, "POST", samples.WIDGETS, samples.widget("a", limits={"low": 9, "high": 2})
    )
    assert causes(body) == {"spec.limits": 'Invalid value: "object": low must not exceed high'}
    ok = samples.widget("a", 3, tags=["a", "b", "c"], schedule={"cron": "* * * * *"})
    assert (await call(http, "POST", samples.WIDGETS, ok))[0] == 201


async def test_transition_rules_see_old_self_on_update_only(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    assert (await call(http, "POST", samples.WIDGETS, samples.widget("a", immutable="one")))[
        0
    ] == 201
    _, body = await call(
        http, "PATCH", f"{samples.WIDGETS}/a", {"spec": {"immutable": "two"}}, MERGE
    )
    assert causes(body) == {"spec.immutable": 'Invalid value: "string": immutable is immutable'}
    assert (await call(http, "PATCH", f"{samples.WIDGETS}/a", {"spec": {"size": 4}}, MERGE))[
        0
    ] == 200
    assert widgets.get("widgets", "a", "default")["spec"]["immutable"] == "one"


async def test_validation_also_guards_put_and_status_writes(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    _, created = await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    replaced = copy.deepcopy(created)
    replaced["spec"]["size"] = 0
    _, body = await call(http, "PUT", f"{samples.WIDGETS}/a", replaced)
    assert "spec.size" in causes(body)
    _, body = await call(
        http, "PATCH", f"{samples.WIDGETS}/a/status", {"status": {"phase": 5}}, MERGE
    )
    assert "status.phase" in causes(body)


async def test_a_crd_with_a_broken_schema_or_rule_is_refused(
    kube: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    broken = copy.deepcopy(samples.WIDGET_CRD)
    version = broken["spec"]["versions"][0]
    version["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] = [
        {"rule": "self.size >"}
    ]
    version["schema"]["openAPIV3Schema"]["properties"]["loose"] = {"description": "no type"}
    code, body = await call(http, "POST", samples.CRDS, broken)
    assert code == 422
    fields = causes(body)
    prefix = "spec.versions[0].schema.openAPIV3Schema.properties"
    assert f"{prefix}[spec].x-kubernetes-validations[0].rule" in fields
    assert f"{prefix}[loose].type" in fields
    unknown_function = copy.deepcopy(samples.WIDGET_CRD)
    schema = unknown_function["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["x-kubernetes-validations"] = [{"rule": "self.size.frobnicate()"}]
    code, body = await call(http, "POST", samples.CRDS, unknown_function)
    assert code == 422 and "frobnicate" in body["message"]
    misnamed = copy.deepcopy(samples.WIDGET_CRD)
    misnamed["metadata"]["name"] = "widgets.other.dev"
    assert "metadata.name" in causes((await call(http, "POST", samples.CRDS, misnamed))[1])
    assert kube.get("customresourcedefinitions", "widgets.example.dev") is None
