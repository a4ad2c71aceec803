"""Bulk operations over HTTP: a dry run's count, 202 and progress to done, cancel,
another tenant's operation, worker tokens, bad filters; runs by state across jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bulk_seeding import OTHER, TENANT, seed_dead, states
from conftest import ApiServer

from api.clients import client

# Recent deaths: the test server's scheduler keeps 30 days of history.
T1 = datetime.now(UTC) - timedelta(hours=3)
T2 = T1 + timedelta(hours=2)


@pytest.fixture
async def dead(api_server: ApiServer) -> ApiServer:
    await seed_dead(api_server.database, TENANT, "export-a", 6, T1, "Timeout")
    await seed_dead(api_server.database, TENANT, "report", 3, T2, "boom")
    await seed_dead(api_server.database, OTHER, "export-a", 2, T1, "Timeout")
    return api_server


async def test_a_dry_run_counts_and_changes_nothing(dead: ApiServer) -> None:
    async with client(dead, dead.team_token) as http:
        answer = await http.post(
            "/v1/operations",
            json={"action": "replay", "filter": {"jobPattern": "export-*"}, "dryRun": True},
        )
        listed = await http.get("/v1/operations")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "dryRun": True,
        "action": "replay",
        "filter": {"jobPattern": "export-*", "state": "dead"},
        "total": 6,
    }
    assert listed.json() == {"items": []}
    assert await states(dead.database, TENANT) == {"dead": 9}


async def test_an_operation_is_accepted_runs_to_done_and_shows_its_progress(
    dead: ApiServer,
) -> None:
    async with client(dead, dead.team_token) as http:
        answer = await http.post(
            "/v1/operations", json={"action": "replay", "filter": {"errorContains": "timeout"}}
        )
        assert answer.status_code == 202, answer.text
        made = answer.json()
        assert (made["state"], made["total"], made["processed"], made["percent"]) == (
            "running",
            6,
            0,
            0,
        )
        assert made["actor"] == "acme-team" and made["filter"]["errorContains"] == "timeout"
        for _ in range(20):
            await dead.scheduler.pass_once()
            progress = (await http.get(f"/v1/operations/{made['id']}")).json()
            if progress["state"] != "running":
                break
        listed = (await http.get("/v1/operations")).json()["items"]
        audit = (await http.get("/v1/audit")).json()["items"]
    assert (progress["state"], progress["processed"], progress["percent"]) == ("done", 6, 100)
    assert sum(s["total"] for s in progress["shards"]) == 6
    assert [item["id"] for item in listed] == [made["id"]]
    assert [(e["action"], e["detail"]["total"]) for e in audit] == [("bulk-replay", 6)]
    assert await states(dead.database, TENANT) == {"ready": 6, "dead": 3}
    assert await states(dead.database, OTHER) == {"dead": 2}


async def test_cancel_stops_an_operation(dead: ApiServer) -> None:
    async with client(dead, dead.team_token) as http:
        made = (await http.post("/v1/operations", json={"action": "discard"})).json()
        cancelled = await http.post(f"/v1/operations/{made['id']}:cancel")
        await dead.scheduler.pass_once()
        again = await http.post(f"/v1/operations/{made['id']}:cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert again.json()["state"] == "cancelled"
    assert await states(dead.database, TENANT) == {"dead": 9}


async def test_another_tenants_operation_is_not_found_and_workers_are_refused(
    dead: ApiServer,
) -> None:
    async with client(dead, dead.team_token) as http:
        made = (await http.post("/v1/operations", json={"action": "replay"})).json()
    async with client(dead, dead.other_team_token) as other:
        seen = await other.get(f"/v1/operations/{made['id']}")
        stop = await other.post(f"/v1/operations/{made['id']}:cancel")
        mine = await other.post("/v1/operations", json={"action": "replay", "dryRun": True})
    async with client(dead, dead.worker_token) as worker:
        refused = await worker.post("/v1/operations", json={"action": "replay"})
        listing = await worker.get("/v1/runs", params={"state": "dead"})
    assert (seen.status_code, stop.status_code) == (404, 404)
    assert mine.json()["total"] == 2  # its own tenant's dead runs only
    assert (refused.status_code, listing.status_code) == (403, 403)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "retry"}, "action"),
        ({}, "action"),
        ({"action": "replay", "filter": {"job": "Bad Name"}}, "filter.job"),
        ({"action": "replay", "filter": {"jobPattern": "a%"}}, "filter.jobPattern"),
        ({"action": "replay", "filter": {"job": "a", "jobPattern": "a*"}}, "filter.jobPattern"),
        ({"action": "replay", "filter": {"state": "ready"}}, "filter.state"),
        ({"action": "cancel", "filter": {"state": "dead"}}, "filter.state"),
        ({"action": "replay", "filter": {"from": "yesterday"}}, "filter.from"),
        (
            {
                "action": "replay",
                "filter": {"from": "2026-03-15T00:00:00Z", "to": "2026-03-14T00:00:00Z"},
            },
            "filter.to",
        ),
        ({"action": "replay", "filter": {"errorContains": ""}}, "filter.errorContains"),
        ({"action": "replay", "filter": {"minAttempts": -1}}, "filter.minAttempts"),
        ({"action": "replay", "filter": {"maxAttempts": "3"}}, "filter.maxAttempts"),
        ({"action": "replay", "filter": {"nope": 1}}, "filter.nope"),
        ({"action": "replay", "dryRun": "yes"}, "dryRun"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    api_server: ApiServer, body: dict[str, Any], field: str
) -> None:
    async with client(api_server, api_server.team_token) as http:
        answer = await http.post("/v1/operations", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == field


async def test_runs_by_state_across_jobs(dead: ApiServer) -> None:
    async with client(dead, dead.team_token) as http:
        first = await http.get("/v1/runs", params={"state": "dead", "limit": 5})
        rest = await http.get(
            "/v1/runs", params={"state": "dead", "cursor": first.json()["nextCursor"]}
        )
        ranged = await http.get(
            "/v1/runs",
            params={"state": "dead", "from": T2.isoformat(), "jobPattern": "rep*"},
        )
        bad = await http.get("/v1/runs", params={"state": "dead", "to": "soon"})
        missing = await http.get("/v1/runs")
        unknown = await http.get("/v1/runs", params={"state": "gone"})
    assert first.status_code == 200, first.text
    ids = [r["runId"] for r in first.json()["items"] + rest.json()["items"]]
    assert len(ids) == len(set(ids)) == 9 and rest.json()["nextCursor"] is None
    assert {r["job"] for r in ranged.json()["items"]} == {"report"}
    assert len(ranged.json()["items"]) == 3
    assert (bad.status_code, bad.json()["field"]) == (400, "to")
    assert (missing.status_code, missing.json()["field"]) == (400, "state")
    assert (unknown.status_code, unknown.json()["field"]) == (400, "state")


async def test_unknown_operation_ids_are_not_found(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as http:
        absent = await http.get("/v1/operations/op-0000000000000000")
        malformed = await http.get("/v1/operations/123")
    assert absent.status_code == 404
    assert (malformed.status_code, malformed.json()["field"]) == (400, "operationId")
