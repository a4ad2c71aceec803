"""The emulated API server's core semantics, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import aiohttp
import pytest

from kube import emulator, samples

MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}
STRATEGIC = {"Content-Type": "application/strategic-merge-patch+json"}
TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}


async def call(
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    **params: str,
) -> tuple[int, Any]:
    data = json.dumps(body) if body is not None else None
    headers = {"Content-Type": "application/json", **(headers or {})}
    async with http.request(method, path, data=data, headers=headers, params=params) as response:
        return response.status, await response.json(content_type=None)


async def read_events(
    response: aiohttp.ClientResponse, count: int, within: float = 3.0
) -> list[dict[str, Any]]:
    events = []
    async with asyncio.timeout(within):
        while len(events) < count:
            line = await response.content.readline()
            if not line:
                break
            events.append(json.loads(line))
    return events


def names(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"].get("metadata", {}).get("name", "")) for e in events]


# --- create, read, list -------------------------------------------------------------------


async def test_create_assigns_identity_and_copies_the_url_namespace(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    code, body = await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    assert code == 201
    meta = body["metadata"]
    assert meta["namespace"] == "default"
    assert meta["generation"] == 1
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert int(meta["resourceVersion"]) == widgets.resource_version
    assert widgets.get("widgets", "a", "default")["metadata"]["uid"] == meta["uid"]


async def test_create_twice_is_409_already_exists(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    code, body = await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    assert (code, body["reason"], body["kind"]) == (409, "AlreadyExists", "Status")
    assert body["message"] == 'widgets.example.dev "a" already exists'
    assert body["details"] == {"name": "a", "group": "example.dev", "kind": "widgets"}


async def test_create_checks_namespace_name_and_kind(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    other = samples.widget("a")
    other["metadata"]["namespace"] = "elsewhere"
    assert (await call(http, "POST", samples.WIDGETS, other))[0] == 400
    missing = await call(
        http, "POST", samples.WIDGETS.replace("default", "nowhere"), samples.widget("a")
    )
    assert (missing[0], missing[1]["message"]) == (404, 'namespaces "nowhere" not found')
    code, body = await call(http, "POST", samples.WIDGETS, samples.widget("Not_A_Name"))
    assert (code, body["details"]["causes"][0]["field"]) == (422, "metadata.name")
    wrong_kind = {**samples.widget("a"), "kind": "Gadget"}
    assert (await call(http, "POST", samples.WIDGETS, wrong_kind))[0] == 400
    generated = samples.widget("")
    generated["metadata"] = {"generateName": "w-"}
    code, body = await call(http, "POST", samples.WIDGETS, generated)
    assert (
        code == 201
        and body["metadata"]["name"].startswith("w-")
        and len(body["metadata"]["name"]) == 7
    )


async def test_get_missing_is_a_404_status(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    code, body = await call(http, "GET", f"{samples.WIDGETS}/nope")
    assert code == 404
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'widgets.example.dev "nope" not found',
        "reason": "NotFound",
        "code": 404,
        "details": {"name": "nope", "group": "example.dev", "kind": "widgets"},
    }
    assert (await call(http, "GET", "/apis/example.dev/v1/namespaces/default/nothings"))[0] == 404


async def test_list_has_kind_and_resource_version(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    for name in ("b", "a"):
        await call(http, "POST", samples.WIDGETS, samples.widget(name))
    code, body = await call(http, "GET", samples.WIDGETS)
    assert code == 200
    assert (body["kind"], body["apiVersion"]) == ("WidgetList", "example.dev/v1")
    assert body["metadata"]["resourceVersion"] == str(widgets.resource_version)
    assert [i["metadata"]["name"] for i in body["items"]] == ["a", "b"]
    assert all(i["kind"] == "Widget" for i in body["items"])
    everywhere = await call(http, "GET", "/apis/example.dev/v1/widgets")
    assert len(everywhere[1]["items"]) == 2


async def test_namespaces_list_and_watch(
    kube: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    code, body = await call(http, "GET", "/api/v1/namespaces")
    assert code == 200 and body["kind"] == "NamespaceList"
    assert {"default", "kube-system"} <= {i["metadata"]["name"] for i in body["items"]}
    rv = body["metadata"]["resourceVersion"]
    async with http.get(
        "/api/v1/namespaces", params={"watch": "true", "resourceVersion": rv}
    ) as response:
        await kube.create_namespace("team-a", labels={"tier": "gold"})
        (event,) = await read_events(response, 1)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "team-a")
    assert event["object"]["metadata"]["labels"]["kubernetes.io/metadata.name"] == "team-a"
    assert event["object"]["status"]["phase"] == "Active"


async def test_pagination_with_limit_and_continue(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    for index in range(5):
        await call(http, "POST", samples.WIDGETS, samples.widget(f"w{index}"))
    _, first = await call(http, "GET", samples.WIDGETS, limit="2")
    assert [i["metadata"]["name"] for i in first["items"]] == ["w0", "w1"]
    assert first["metadata"]["remainingItemCount"] == 3
    _, second = await call(
        http, "GET", samples.WIDGETS, limit="10", **{"continue": first["metadata"]["continue"]}
    )
    assert [i["metadata"]["name"] for i in second["items"]] == ["w2", "w3", "w4"]
    assert "continue" not in second["metadata"]


# --- update and patch ----------------------------------------------------------------------


async def test_put_replaces_and_refuses_a_stale_resource_version(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    _, created = await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    changed = {**created, "spec": {"size": 4}}
    code, updated = await call(http, "PUT", f"{samples.WIDGETS}/a", changed)
    assert code == 200 and updated["spec"] == {"size": 4, "color": "red"}
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert updated["metadata"]["generation"] == 2
    stale = {**created, "spec": {"size": 5}}  # still carries the first resourceVersion
    code, body = await call(http, "PUT", f"{samples.WIDGETS}/a", stale)
    assert (code, body["reason"]) == (409, "Conflict")
    assert "the object has been modified" in body["message"]
    assert widgets.get("widgets", "a", "default")["spec"]["size"] == 4
    blind = {**samples.widget("a"), "spec": {"size": 6}}  # no resourceVersion
    code, body = await call(http, "PUT", f"{samples.WIDGETS}/a", blind)
    assert (code, body["details"]["causes"][0]["field"]) == (422, "metadata.resourceVersion")
    assert body["message"] == (
        'widgets.example.dev "a" is invalid: metadata.resourceVersion: Invalid value: 0: '
        "must be specified for an update"
    )
    secret = {"metadata": {"name": "s"}, "data": {}}
    await call(http, "POST", "/api/v1/namespaces/default/secrets", secret)
    assert (await call(http, "PUT", "/api/v1/namespaces/default/secrets/s", secret))[0] == 200
    # Leases may be created by a PUT (AllowCreateOnUpdate), unless it names a version.
    assert (await call(http, "PUT", f"{samples.LEASES}/new", samples.lease("new")))[0] == 201
    stale = samples.lease("other")
    stale["metadata"]["resourceVersion"] = "5"
    assert (await call(http, "PUT", f"{samples.LEASES}/other", stale))[0] == 409
    assert (await call(http, "PUT", f"{samples.WIDGETS}/b", samples.widget("b")))[0] == 404
    assert (await call(http, "PUT", f"{samples.WIDGETS}/a", samples.widget("other")))[0] == 400


async def test_merge_patch_and_stale_resource_version_in_a_patch(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    _, created = await call(http, "POST", samples.WIDGETS, samples.widget("a", tags=["x"]))
    code, body = await call(
        http, "PATCH", f"{samples.WIDGETS}/a", {"spec": {"size": 5, "tags": None}}, MERGE
    )
    assert code == 200 and body["spec"] == {"size": 5, "color": "red"}
    stale = {
        "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
        "spec": {"size": 6},
    }
    code, body = await call(http, "PATCH", f"{samples.WIDGETS}/a", stale, MERGE)
    assert (code, body["reason"]) == (409, "Conflict")


async def test_json_patch_with_a_failing_test_is_422_and_writes_nothing(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    _, created = await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "999999"},
        {"op": "add", "path": "/metadata/finalizers", "value": ["example.dev/x"]},
    ]
    code, body = await call(http, "PATCH", f"{samples.WIDGETS}/a", ops, JSON_PATCH)
    assert (code, body["reason"]) == (422, "Invalid")
    assert "finalizers" not in widgets.get("widgets", "a", "default")["metadata"]
    ops[0]["value"] = created["metadata"]["resourceVersion"]
    code, body = await call(http, "PATCH", f"{samples.WIDGETS}/a", ops, JSON_PATCH)
    assert code == 200 and body["metadata"]["finalizers"] == ["example.dev/x"]
    bad_path = [{"op": "remove", "path": "/spec/absent"}]
    assert (await call(http, "PATCH", f"{samples.WIDGETS}/a", bad_path, JSON_PATCH))[0] == 422


async def test_strategic_merge_is_refused_for_custom_resources_only(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    code, body = await call(http, "PATCH", f"{samples.WIDGETS}/a", {"spec": {"size": 2}}, STRATEGIC)
    assert (code, body["reason"]) == (415, "UnsupportedMediaType")
    await call(http, "POST", samples.LEASES, samples.lease("l"))
    code, body = await call(
        http, "PATCH", f"{samples.LEASES}/l", {"spec": {"holderIdentity": "b"}}, STRATEGIC
    )
    assert code == 200 and body["spec"]["holderIdentity"] == "b"


async def test_generation_follows_spec_not_metadata_or_status(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    _, body = await call(
        http, "PATCH", f"{samples.WIDGETS}/a", {"metadata": {"labels": {"x": "y"}}}, MERGE
    )
    assert body["metadata"]["generation"] == 1
    _, body = await call(
        http, "PATCH", f"{samples.WIDGETS}/a/status", {"status": {"phase": "Ok"}}, MERGE
    )
    assert body["metadata"]["generation"] == 1
    _, body = await call(http, "PATCH", f"{samples.WIDGETS}/a", {"spec": {"size": 9}}, MERGE)
    assert body["metadata"]["generation"] == 2
    # Without a status subresource, status is an ordinary field and counts.
    await widgets.create(samples.GADGET_CRD)
    gadget = {
        "apiVersion": "example.dev/v1",
        "kind": "Gadget",
        "metadata": {"name": "g"},
        "status": {"a": 1},
    }
    _, body = await call(http, "POST", samples.GADGETS, gadget)
    assert body["status"] == {"a": 1}
    _, body = await call(http, "PATCH", f"{samples.GADGETS}/g", {"status": {"a": 2}}, MERGE)
    assert (body["metadata"]["generation"], body["status"]) == (2, {"a": 2})


async def test_status_subresource_separation(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    created = {**samples.widget("a"), "status": {"phase": "Sneaky"}}
    _, body = await call(http, "POST", samples.WIDGETS, created)
    assert "status" not in body  # create cannot set status
    _, body = await call(
        http,
        "PATCH",
        f"{samples.WIDGETS}/a",
        {"spec": {"size": 4}, "status": {"phase": "X"}},
        MERGE,
    )
    assert body["spec"]["size"] == 4 and "status" not in body
    _, body = await call(
        http,
        "PATCH",
        f"{samples.WIDGETS}/a/status",
        {"spec": {"size": 9}, "metadata": {"labels": {"a": "b"}}, "status": {"phase": "Ok"}},
        MERGE,
    )
    assert body["status"] == {"phase": "Ok"}
    assert body["spec"]["size"] == 4 and "labels" not in body["metadata"]
    stored = widgets.get("widgets", "a", "default")
    assert (stored["spec"]["size"], stored["status"]["phase"]) == (4, "Ok")
    _, body = await call(
        http, "PUT", f"{samples.WIDGETS}/a/status", {**stored, "status": {"phase": "Put"}}
    )
    assert body["status"] == {"phase": "Put"}
    _, current = await call(http, "GET", f"{samples.WIDGETS}/a/status")
    assert current["status"] == {"phase": "Put"} and current["spec"]["size"] == 4
    assert (await call(http, "PATCH", f"{samples.LEASES}/x/status", {}, MERGE))[0] == 404


async def test_a_no_op_write_keeps_the_resource_version(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    _, created = await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    before = widgets.resource_version
    _, body = await call(http, "PATCH", f"{samples.WIDGETS}/a", {"spec": {"size": 3}}, MERGE)
    assert body["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert widgets.resource_version == before


# --- delete and finalizers ---------------------------------------------------------------


async def test_delete_waits_for_finalizers(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    held = samples.widget("a")
    held["metadata"]["finalizers"] = ["example.dev/cleanup"]
    _, created = await call(http, "POST", samples.WIDGETS, held)
    rv = created["metadata"]["resourceVersion"]
    async with http.get(samples.WIDGETS, params={"watch": "true", "resourceVersion": rv}) as watch:
        code, body = await call(http, "DELETE", f"{samples.WIDGETS}/a")
        assert code == 200 and body["metadata"]["deletionTimestamp"]
        assert body["metadata"]["generation"] == 2
        assert widgets.get("widgets", "a", "default") is not None
        again = await call(http, "DELETE", f"{samples.WIDGETS}/a")
        assert again[1]["metadata"]["deletionTimestamp"] == body["metadata"]["deletionTimestamp"]
        code, refused = await call(
            http,
            "PATCH",
            f"{samples.WIDGETS}/a",
            {"metadata": {"finalizers": ["example.dev/cleanup", "new"]}},
            MERGE,
        )
        assert (code, refused["details"]["causes"][0]["field"]) == (422, "metadata.finalizers")
        code, _ = await call(
            http, "PATCH", f"{samples.WIDGETS}/a", {"metadata": {"finalizers": None}}, MERGE
        )
        assert code == 200
        events = await read_events(watch, 2)
    assert names(events) == [("MODIFIED", "a"), ("DELETED", "a")]
    assert widgets.get("widgets", "a", "default") is None
    assert (await call(http, "GET", f"{samples.WIDGETS}/a"))[0] == 404


async def test_delete_without_finalizers_and_preconditions(
    kube: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    _, created = await call(http, "POST", samples.LEASES, samples.lease("l"))
    wrong = {"preconditions": {"resourceVersion": "1"}}
    assert (await call(http, "DELETE", f"{samples.LEASES}/l", wrong))[0] == 409
    right = {"preconditions": {"uid": created["metadata"]["uid"]}}
    code, body = await call(http, "DELETE", f"{samples.LEASES}/l", right)
    assert (code, body["kind"], body["status"]) == (200, "Status", "Success")
    assert kube.get("leases", "l", "default") is None
    assert (await call(http, "DELETE", f"{samples.LEASES}/l"))[0] == 404


async def test_deleting_a_namespace_deletes_its_content(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    await widgets.create_namespace("team-a")
    held = samples.widget("a")
    held["metadata"]["finalizers"] = ["example.dev/x"]
    await call(http, "POST", samples.WIDGETS.replace("default", "team-a"), held)
    await call(http, "POST", samples.LEASES.replace("default", "team-a"), samples.lease("l"))
    code, body = await call(http, "DELETE", "/api/v1/namespaces/team-a")
    assert code == 200 and body["status"]["phase"] == "Terminating"
    assert widgets.get("leases", "l", "team-a") is None
    assert widgets.get("widgets", "a", "team-a")["metadata"]["deletionTimestamp"]
    code, body = await call(
        http, "POST", samples.LEASES.replace("default", "team-a"), samples.lease("m")
    )
    assert (code, body["reason"]) == (403, "Forbidden")
    await widgets.patch("widgets", "a", {"metadata": {"finalizers": None}}, namespace="team-a")
    assert widgets.get("namespaces", "team-a") is None


async def test_deleting_a_crd_stops_serving_it(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    code, _ = await call(http, "DELETE", f"{samples.CRDS}/widgets.example.dev")
    assert code == 200
    assert widgets.get("customresourcedefinitions", "widgets.example.dev") is None
    assert (await call(http, "GET", samples.WIDGETS))[0] == 404
    _, groups = await call(http, "GET", "/apis")
    assert "example.dev" not in {g["name"] for g in groups["groups"]}


async def test_dry_run_persists_nothing(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    code, body = await call(http, "POST", samples.WIDGETS, samples.widget("a"), dryRun="All")
    assert code == 201 and body["spec"]["color"] == "red"
    assert widgets.get("widgets", "a", "default") is None


# --- selectors -----------------------------------------------------------------------------


async def test_label_and_field_selectors_on_list(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    for name, labels in (
        ("a", {"tier": "gold", "team": "x"}),
        ("b", {"tier": "silver"}),
        ("c", {}),
    ):
        body = samples.widget(name, color="blue" if name == "b" else "red")
        body["metadata"]["labels"] = labels
        await call(http, "POST", samples.WIDGETS, body)

    async def selected(**params: str) -> list[str]:
        code, body = await call(http, "GET", samples.WIDGETS, **params)
        assert code == 200, body
        return [i["metadata"]["name"] for i in body["items"]]

    assert await selected(labelSelector="tier=gold") == ["a"]
    assert await selected(labelSelector="tier!=gold") == ["b", "c"]
    assert await selected(labelSelector="tier in (gold, silver)") == ["a", "b"]
    assert await selected(labelSelector="tier notin (gold)") == ["b", "c"]
    assert await selected(labelSelector="tier") == ["a", "b"]
    assert await selected(labelSelector="!tier") == ["c"]
    assert await selected(labelSelector="tier=gold,team=x") == ["a"]
    assert await selected(fieldSelector="metadata.name=b") == ["b"]
    assert await selected(fieldSelector="metadata.name!=b,metadata.namespace=default") == ["a", "c"]
    assert await selected(fieldSelector="spec.color=blue") == ["b"]  # a CRD selectableField
    code, body = await call(http, "GET", samples.WIDGETS, fieldSelector="spec.size=3")
    assert (code, body["message"]) == (400, "field label not supported: spec.size")
    assert (await call(http, "GET", samples.WIDGETS, labelSelector="a in b"))[0] == 400


async def test_watch_reports_objects_moving_in_and_out_of_a_selection(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    params = {
        "watch": "true",
        "labelSelector": "tier=gold",
        "resourceVersion": str(widgets.resource_version),
    }
    async with http.get(samples.WIDGETS, params=params) as watch:
        await call(http, "POST", samples.WIDGETS, samples.widget("a"))
        await call(
            http, "PATCH", f"{samples.WIDGETS}/a", {"metadata": {"labels": {"tier": "gold"}}}, MERGE
        )
        await call(http, "PATCH", f"{samples.WIDGETS}/a", {"spec": {"size": 4}}, MERGE)
        await call(
            http, "PATCH", f"{samples.WIDGETS}/a", {"metadata": {"labels": {"tier": "lead"}}}, MERGE
        )
        events = await read_events(watch, 3)
    assert names(events) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


# --- watch ---------------------------------------------------------------------------------


async def test_watch_from_a_resource_version_sends_only_later_events(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", samples.WIDGETS, samples.widget("old"))
    _, listed = await call(http, "GET", samples.WIDGETS)
    since = listed["metadata"]["resourceVersion"]
    await call(http, "POST", samples.WIDGETS, samples.widget("missed"))  # between list and watch
    async with http.get(
        samples.WIDGETS, params={"watch": "true", "resourceVersion": since}
    ) as watch:
        assert watch.headers["Content-Type"].startswith("application/json")
        await call(http, "PATCH", f"{samples.WIDGETS}/old", {"spec": {"size": 5}}, MERGE)
        events = await read_events(watch, 2)
    assert names(events) == [("ADDED", "missed"), ("MODIFIED", "old")]
    assert int(events[1]["object"]["metadata"]["resourceVersion"]) > int(
        events[0]["object"]["metadata"]["resourceVersion"]
    )


async def test_watch_without_a_resource_version_starts_with_the_current_state(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    async with http.get(samples.WIDGETS, params={"watch": "true"}) as watch:
        await call(http, "POST", samples.WIDGETS, samples.widget("b"))
        events = await read_events(watch, 2)
    assert names(events) == [("ADDED", "a"), ("ADDED", "b")]


async def test_watch_bookmarks_and_initial_events_end(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    params = {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
    }
    async with http.get(samples.WIDGETS, params=params) as watch:
        first = await read_events(watch, 2)
        widgets.bookmark()
        (bookmark,) = await read_events(watch, 1)
    assert names(first)[0] == ("ADDED", "a")
    assert first[1]["type"] == "BOOKMARK"
    assert first[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert bookmark["type"] == "BOOKMARK" and bookmark["object"]["kind"] == "Widget"
    assert bookmark["object"]["metadata"]["resourceVersion"] == str(widgets.resource_version)
    bad = {"watch": "true", "sendInitialEvents": "true"}
    async with http.get(samples.WIDGETS, params=bad) as refused:
        assert refused.status == 422


async def test_watch_timeout_seconds_ends_the_stream(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with http.get(
        samples.WIDGETS, params={"watch": "true", "timeoutSeconds": "0.2"}
    ) as watch:
        assert await watch.content.read() == b""
    assert loop.time() - started < 2


async def test_watch_from_a_compacted_resource_version_is_410_gone(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    old = str(widgets.resource_version - 1)
    widgets.compact()
    async with http.get(samples.WIDGETS, params={"watch": "true", "resourceVersion": old}) as watch:
        assert watch.status == 200
        (event,) = await read_events(watch, 1)
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


# --- discovery -----------------------------------------------------------------------------


async def test_discovery_serves_built_ins_and_crds(
    kube: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    _, api = await call(http, "GET", "/api")
    assert (api["kind"], api["versions"]) == ("APIVersions", ["v1"])
    _, core = await call(http, "GET", "/api/v1")
    core_names = {r["name"] for r in core["resources"]}
    assert {"namespaces", "namespaces/status", "events", "secrets", "serviceaccounts"} <= core_names
    _, groups = await call(http, "GET", "/apis")
    assert "example.dev" not in {g["name"] for g in groups["groups"]}
    assert {"coordination.k8s.io", "authentication.k8s.io", "authorization.k8s.io"} <= {
        g["name"] for g in groups["groups"]
    }
    await call(http, "POST", samples.CRDS, samples.WIDGET_CRD)
    _, groups = await call(http, "GET", "/apis")
    (entry,) = [g for g in groups["groups"] if g["name"] == "example.dev"]
    assert entry["preferredVersion"] == {"groupVersion": "example.dev/v1", "version": "v1"}
    _, group = await call(http, "GET", "/apis/example.dev")
    assert group["kind"] == "APIGroup"
    _, served = await call(http, "GET", "/apis/example.dev/v1")
    assert served["groupVersion"] == "example.dev/v1"
    (main,) = [r for r in served["resources"] if r["name"] == "widgets"]
    assert main["shortNames"] == ["wd"] and main["namespaced"] and main["kind"] == "Widget"
    assert "watch" in main["verbs"] and main["categories"] == ["toys"]
    assert "widgets/status" in {r["name"] for r in served["resources"]}
    _, version = await call(http, "GET", "/version")
    assert version["major"] == "1"
    crd = kube.get("customresourcedefinitions", "widgets.example.dev")
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"


# --- built-ins -----------------------------------------------------------------------------


async def test_events_in_both_apis_share_one_storage(
    kube: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    core = {
        "metadata": {"generateName": "ev-"},
        "involvedObject": {"kind": "Widget", "name": "a", "namespace": "default"},
        "reason": "Scheduled",
        "message": "stored",
        "type": "Normal",
    }
    code, body = await call(http, "POST", "/api/v1/namespaces/default/events", core)
    assert code == 201
    new = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "n1"},
        "regarding": {"kind": "Widget", "name": "b", "namespace": "default"},
        "note": "dead",
        "reason": "RunDead",
        "type": "Warning",
        "action": "Run",
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "tickwork.dev/operator",
        "reportingInstance": "op-1",
    }
    assert (await call(http, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", new))[
        0
    ] == 201
    _, listed = await call(
        http, "GET", "/api/v1/namespaces/default/events", fieldSelector="involvedObject.name=b"
    )
    assert [(e["reason"], e["message"]) for e in listed["items"]] == [("RunDead", "dead")]
    _, listed = await call(
        http,
        "GET",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        fieldSelector="reason=Scheduled",
    )
    assert [(e["note"], e["regarding"]["name"]) for e in listed["items"]] == [("stored", "a")]
    missing = {**new, "metadata": {"name": "n2"}}
    del missing["reportingController"]
    code, body = await call(
        http, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", missing
    )
    assert (code, body["details"]["causes"][0]["field"]) == (422, "reportingController")


async def test_secrets_service_accounts_and_leases(
    kube: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    secret = {"metadata": {"name": "s"}, "stringData": {"dsn": "postgres://x"}}
    _, body = await call(http, "POST", "/api/v1/namespaces/default/secrets", secret)
    assert (
        body["data"] == {"dsn": "cG9zdGdyZXM6Ly94"}
        and body["type"] == "Opaque"
        and "stringData" not in body
    )
    assert (
        await call(
            http, "POST", "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "w"}}
        )
    )[0] == 201
    lease = samples.lease("l", renewTime="2026-01-01T00:00:00+00:00")
    _, body = await call(http, "POST", samples.LEASES, lease)
    assert body["spec"]["renewTime"] == "2026-01-01T00:00:00.000000Z"
    assert "generation" not in body["metadata"]
    code, body = await call(
        http, "POST", samples.LEASES, samples.lease("m", leaseDurationSeconds=0)
    )
    assert (code, body["details"]["causes"][0]["field"]) == (422, "spec.leaseDurationSeconds")


async def test_token_and_access_reviews_answer_as_scripted(
    kube: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    from kube.reviews import User

    kube.tokens["good"] = User.service_account("team-a", "worker", uid="u-1")
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "good"},
    }
    code, body = await call(http, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", review)
    assert code == 201 and body["status"]["authenticated"] is True
    assert body["status"]["user"]["username"] == "system:serviceaccount:team-a:worker"
    assert "system:serviceaccounts:team-a" in body["status"]["user"]["groups"]
    _, body = await call(
        http,
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {**review, "spec": {"token": "bad"}},
    )
    assert body["status"]["authenticated"] is False and body["status"]["error"]

    kube.access.allow(
        user="system:serviceaccount:team-a:*",
        verb="lease",
        resource="queues",
        api_group="tickwork.dev",
        namespace="team-a",
    )
    sar = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "system:serviceaccount:team-a:worker",
            "resourceAttributes": {
                "group": "tickwork.dev",
                "resource": "queues",
                "verb": "lease",
                "namespace": "team-a",
                "name": "emails",
            },
        },
    }
    _, body = await call(http, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)
    assert body["status"]["allowed"] is True
    sar["spec"]["resourceAttributes"]["namespace"] = "team-b"
    _, body = await call(http, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)
    assert body["status"]["allowed"] is False
    assert (await call(http, "GET", "/apis/authorization.k8s.io/v1/subjectaccessreviews"))[0] == 405
    assert (
        await call(
            http,
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {"spec": {"user": "x"}},
        )
    )[0] == 422
    assert kube.count("create", "tokenreviews") == 2
    assert kube.calls[("create", "subjectaccessreviews")] == 3


# --- faults, audit, tables ----------------------------------------------------------------


async def test_scripted_faults_answer_errors_and_write_nothing(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", samples.LEASES, samples.lease("l"))
    fault = widgets.fail("patch", "leases", code=409, times=2)
    for _ in range(2):
        code, body = await call(
            http, "PATCH", f"{samples.LEASES}/l", {"spec": {"holderIdentity": "b"}}, MERGE
        )
        assert (code, body["reason"]) == (409, "Conflict")
    assert widgets.get("leases", "l", "default")["spec"]["holderIdentity"] == "a"
    assert fault.spent
    assert (
        await call(http, "PATCH", f"{samples.LEASES}/l", {"spec": {"holderIdentity": "b"}}, MERGE)
    )[0] == 200
    widgets.fail("create", "widgets.example.dev", code=500)
    code, body = await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    assert (code, body["reason"]) == (500, "InternalError")
    assert widgets.get("widgets", "a", "default") is None
    widgets.fail("create", "tokenreviews", code=429, times=None)
    async with http.post(
        "/apis/authentication.k8s.io/v1/tokenreviews", json={"spec": {"token": "x"}}
    ) as response:
        assert response.status == 429 and response.headers["Retry-After"] == "1"
    records = [r for r in widgets.audit if r.resource == "leases" and r.verb == "patch"]
    assert [(r.code, r.fault) for r in records] == [(409, True), (409, True), (200, False)]
    assert records[0].body == {"spec": {"holderIdentity": "b"}}


async def test_a_hanging_call_times_out_the_client_and_writes_nothing(
    kube: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    kube.hang("create", "leases")
    with pytest.raises(TimeoutError):
        async with http.post(
            samples.LEASES, json=samples.lease("l"), timeout=aiohttp.ClientTimeout(total=0.2)
        ):
            pass
    assert kube.get("leases", "l", "default") is None
    assert (await call(http, "POST", samples.LEASES, samples.lease("l")))[0] == 201


async def test_table_output_for_kubectl(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", samples.WIDGETS, samples.widget("a", color="blue"))
    await widgets.patch(
        "widgets",
        "a",
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "next": "2030-01-01T00:00:00Z",
            }
        },
        namespace="default",
        subresource="status",
    )
    async with http.get(samples.WIDGETS, headers=TABLE) as response:
        assert response.headers["Content-Type"] == "application/json;as=Table;v=v1;g=meta.k8s.io"
        body = await response.json(content_type=None)
    assert body["kind"] == "Table"
    assert [c["name"] for c in body["columnDefinitions"]] == [
        "Name",
        "Size",
        "Color",
        "Ready",
        "Next",
        "Age",
    ]
    (row,) = body["rows"]
    assert row["cells"][:5] == ["a", 3, "blue", "True", "2030-01-01T00:00:00Z"]
    assert row["cells"][5].endswith("s")  # an age, as the server renders dates
    assert row["object"]["kind"] == "PartialObjectMetadata"
    async with http.get(f"{samples.LEASES}", headers=TABLE) as response:
        assert [
            c["name"] for c in (await response.json(content_type=None))["columnDefinitions"]
        ] == ["Name", "Holder", "Age"]


async def test_wait_for_sees_changes(
    widgets: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    waiter = asyncio.create_task(
        widgets.wait_for("wd", "a", lambda obj: obj is not None, namespace="default")
    )
    await asyncio.sleep(0)
    await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    assert (await waiter)["metadata"]["name"] == "a"


async def test_a_crd_with_two_versions_serves_one_object_at_both(
    kube: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    crd = copy.deepcopy(samples.GADGET_CRD)
    alpha = {**copy.deepcopy(crd["spec"]["versions"][0]), "name": "v1alpha1", "storage": False}
    crd["spec"]["versions"].append(alpha)
    assert (await call(http, "POST", samples.CRDS, crd))[0] == 201
    _, group = await call(http, "GET", "/apis/example.dev")
    assert group["preferredVersion"]["version"] == "v1"
    assert [v["version"] for v in group["versions"]] == ["v1", "v1alpha1"]
    gadget = {"apiVersion": "example.dev/v1alpha1", "kind": "Gadget", "metadata": {"name": "g"}}
    assert (await call(http, "POST", samples.GADGETS.replace("/v1/", "/v1alpha1/"), gadget))[
        0
    ] == 201
    _, body = await call(http, "GET", f"{samples.GADGETS}/g")
    assert body["apiVersion"] == "example.dev/v1"
    crd = kube.get("crd", "gadgets.example.dev")
    crd["spec"]["versions"][1]["served"] = False
    code, _ = await call(http, "PUT", f"{samples.CRDS}/gadgets.example.dev", crd)
    assert code == 200
    assert (await call(http, "GET", "/apis/example.dev/v1alpha1/namespaces/default/gadgets"))[
        0
    ] == 404
    assert (await call(http, "GET", f"{samples.GADGETS}/g"))[0] == 200
