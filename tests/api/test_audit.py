"""GET /v1/audit: who changed what, newest first, merged across shards."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
from conftest import ApiServer

from api.clients import assert_problem, client


async def every_page(team: httpx.AsyncClient, limit: int, **query: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"limit": str(limit), **query} | ({"cursor": cursor} if cursor else {})
        response = await team.get("/v1/audit", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["items"]) <= limit
        items += page["items"]
        cursor = page["nextCursor"]
        if cursor is None:
            return items


async def test_the_audit_log_lists_who_changed_what_newest_first(api_server: ApiServer) -> None:
    names = [f"job-{i}" for i in range(8)]  # spread over the 4 shards
    async with client(api_server, api_server.team_token) as team:
        for name in names:
            assert (await team.put(f"/v1/jobs/{name}", json={})).status_code == 201
        assert (await team.put("/v1/jobs/job-0", json={"priority": "bulk"})).status_code == 200
        assert (await team.put("/v1/jobs/job-0", json={"priority": "bulk"})).status_code == 200
        assert (await team.post("/v1/jobs/job-1:pause")).status_code == 200
        run = (await team.post("/v1/jobs/job-2/runs", json={"delaySeconds": 60})).json()
        assert (await team.post(f"/v1/runs/{run['runId']}:cancel")).status_code == 200
        assert (await team.delete("/v1/jobs/job-3")).status_code == 200

        everything = (await team.get("/v1/audit", params={"limit": "500"})).json()
        assert everything["nextCursor"] is None
        entries = everything["items"]
        # Newest first; the unchanged second PUT of job-0 recorded nothing.
        assert [(e["action"], e["job"]) for e in entries[:6]] == [
            ("delete", "job-3"),
            ("cancel", "job-2"),
            ("enqueue", "job-2"),
            ("pause", "job-1"),
            ("update", "job-0"),
            ("create", "job-7"),
        ]
        assert len(entries) == len(names) + 5
        instants = [datetime.fromisoformat(e["at"]) for e in entries]
        assert instants == sorted(instants, reverse=True)
        cancel = entries[1]
        assert cancel == {
            "at": cancel["at"],
            "job": "job-2",
            "runId": run["runId"],
            "action": "cancel",
            "actor": "acme-team",
            "detail": None,
        }
        assert entries[4]["detail"] == {"generation": 2}
        assert entries[0]["runId"] is None and entries[0]["detail"]["cancelled"] == 0

        # Small pages walk the same list: nothing skipped, nothing twice.
        assert await every_page(team, 3) == entries
        one_job = await every_page(team, 1, job="job-2")
        assert [e["action"] for e in one_job] == ["cancel", "enqueue", "create"]


async def test_the_audit_log_is_the_tenants_own(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as acme:
        assert (await acme.put("/v1/jobs/payroll", json={})).status_code == 201
        assert_problem(await acme.get("/v1/audit", params={"tenant": "globex"}), 403, "forbidden")
    async with client(api_server, api_server.other_team_token) as globex:
        assert (await globex.get("/v1/audit")).json() == {"items": [], "nextCursor": None}
    async with client(api_server, api_server.admin_token) as admin:
        assert (await admin.get("/v1/audit")).json()["items"] == []  # the admin's own tenant
        [entry] = (await admin.get("/v1/audit", params={"tenant": "acme"})).json()["items"]
        assert (entry["job"], entry["action"], entry["actor"]) == ("payroll", "create", "acme-team")
    async with client(api_server, api_server.worker_token) as worker:
        assert_problem(await worker.get("/v1/audit"), 403, "forbidden")


async def test_bad_audit_queries_are_refused_naming_the_field(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        for params, field in [
            ({"cursor": "not-a-cursor"}, "cursor"),
            ({"job": "Not_A_Name"}, "job"),
            ({"limit": "0"}, "limit"),
            ({"limit": "501"}, "limit"),
        ]:
            refused = await team.get("/v1/audit", params=params)
            assert_problem(refused, 400, "invalid-request", field)
