"""Backfill: the runs a schedule would have made in a past range, once each, across a
DST change exactly as ``schedule preview`` lists them; repeated, it makes nothing."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from click.testing import CliRunner
from conftest import ApiServer

from tickwork.cli import cli
from tickwork.core.cron import CronSchedule
from tickwork.core.preview import fire_times

BERLIN = "Europe/Berlin"
# Around the spring change (29 March 2026: 02:00 → 03:00) and the autumn one (25
# October: 03:00 → 02:00).
SPRING = ("2026-03-27T00:00:00Z", "2026-03-31T00:00:00Z")
AUTUMN = ("2026-10-23T00:00:00Z", "2026-10-27T00:00:00Z")


def client(api_server: ApiServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=api_server.url, headers=api_server.headers(api_server.team_token), timeout=30
    )


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def previewed(cron: str, start: str, end: str) -> list[datetime]:
    schedule = CronSchedule.parse(cron, BERLIN)
    times = fire_times(schedule, instant(start) - timedelta(microseconds=1), 500)
    return [t.instant for t in times if t.instant < instant(end)]


async def backfill(team: httpx.AsyncClient, job: str, start: str, end: str, **more: Any) -> Any:
    answer = await team.post(f"/v1/jobs/{job}:backfill", json={"from": start, "to": end, **more})
    assert answer.status_code == 200, answer.text
    return answer.json()


async def due_times(team: httpx.AsyncClient, job: str) -> list[datetime]:
    found: list[datetime] = []
    cursor = None
    while True:
        params = {"limit": 500} | ({"cursor": cursor} if cursor else {})
        page = (await team.get(f"/v1/jobs/{job}/runs", params=params)).json()
        found += [instant(run["dueAt"]) for run in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            return sorted(found)


async def test_a_backfill_over_dst_changes_makes_what_preview_lists_once(
    api_server: ApiServer,
) -> None:
    async with client(api_server) as team:
        for name, cron in (("nightly", "30 2 * * *"), ("hourly", "15 * * * *")):
            spec = {"schedule": {"cron": cron, "timeZone": BERLIN}}
            assert (await team.put(f"/v1/jobs/{name}", json=spec)).status_code == 201
            expected: list[datetime] = []
            for start, end in (SPRING, AUTUMN):
                made = await backfill(team, name, start, end)
                wanted = previewed(cron, start, end)
                assert [instant(t) for t in made["fireTimes"]] == wanted
                assert (made["created"], made["existing"], made["nextFrom"]) == (
                    len(wanted),
                    0,
                    None,
                )
                expected += wanted
            assert await due_times(team, name) == expected
            # Again, and over an overlapping range: nothing more.
            for start, end in (SPRING, AUTUMN, ("2026-03-28T12:00:00Z", SPRING[1])):
                again = await backfill(team, name, start, end)
                assert again["created"] == 0
                assert again["existing"] == len(again["fireTimes"]) > 0
            assert await due_times(team, name) == expected
        # The spring night: 02:30 does not exist; the fixed-hour job runs once, at the
        # gap's end. The autumn night: 02:30 happens twice; it runs at the first.
        nightly = await due_times(team, "nightly")
        assert instant("2026-03-29T01:00:00Z") in nightly  # 03:00 CEST
        assert instant("2026-10-25T00:30:00Z") in nightly  # 02:30 CEST, the first
        assert instant("2026-10-25T01:30:00Z") not in nightly
        runs = (await team.get("/v1/jobs/nightly/runs")).json()["items"]
        assert {run["state"] for run in runs} == {"ready"}
        assert runs[0]["idempotencyKey"].startswith("acme/nightly@2026-")
        audit = (await team.get("/v1/audit", params={"job": "nightly"})).json()["items"]
        backfills = [e for e in audit if e["action"] == "backfill"]
        # Newest first: the three repeats, then the two that made the runs.
        assert [e["detail"]["created"] for e in backfills] == [0, 0, 0, 4, 4]


async def test_a_long_range_is_made_in_parts_and_a_dry_run_makes_nothing(
    api_server: ApiServer,
) -> None:
    async with client(api_server) as team:
        await team.put("/v1/jobs/minutely", json={"schedule": {"cron": "* * * * *"}})
        start, end = "2026-06-01T00:00:00Z", "2026-06-01T20:00:00Z"  # 1 200 minutes
        dry = await backfill(team, "minutely", start, end, dryRun=True)
        assert (len(dry["fireTimes"]), dry["created"], dry["existing"]) == (1000, 0, 0)
        assert dry["nextFrom"] == "2026-06-01T16:40:00Z"
        assert await due_times(team, "minutely") == []
        first = await backfill(team, "minutely", start, end)
        second = await backfill(team, "minutely", first["nextFrom"], end)
        assert (first["created"], second["created"], second["nextFrom"]) == (1000, 200, None)
        made = await due_times(team, "minutely")
        assert len(made) == len(set(made)) == 1200


async def test_a_forbid_jobs_backfilled_runs_run_one_at_a_time(api_server: ApiServer) -> None:
    async with client(api_server) as team:
        spec = {"schedule": {"cron": "0 * * * *"}, "queue": "billing", "overlapPolicy": "Forbid"}
        await team.put("/v1/jobs/hourly", json=spec)
        made = await backfill(team, "hourly", "2026-06-01T00:00:00Z", "2026-06-01T05:00:00Z")
        assert made["created"] == 5
    async with httpx.AsyncClient(
        base_url=api_server.url, headers=api_server.headers(api_server.worker_token)
    ) as worker:
        leases = (await worker.post("/v1/lease", json={"queues": ["billing"], "max": 10})).json()
        assert [lease["dueAt"] for lease in leases["leases"]] == ["2026-06-01T00:00:00Z"]
        assert (await worker.post("/v1/lease", json={"queues": ["billing"]})).json() == {
            "leases": []
        }


async def test_what_a_backfill_refuses_names_the_field(api_server: ApiServer) -> None:
    async with client(api_server) as team:
        await team.put("/v1/jobs/nightly", json={"schedule": {"cron": "30 2 * * *"}})
        await team.put("/v1/jobs/adhoc", json={})
        future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        for job, body, field in (
            ("nightly", {"from": "2026-06-02T00:00:00Z", "to": "2026-06-01T00:00:00Z"}, "to"),
            ("nightly", {"from": "2026-06-01T00:00:00Z", "to": future}, "to"),
            ("nightly", {"from": "2026-06-01", "to": "2026-06-02T00:00:00Z"}, "from"),
            ("nightly", {"to": "2026-06-02T00:00:00Z"}, "from"),
            ("adhoc", {"from": "2026-06-01T00:00:00Z", "to": "2026-06-02T00:00:00Z"}, "job"),
        ):
            answer = await team.post(f"/v1/jobs/{job}:backfill", json=body)
            assert answer.status_code == 400, (body, answer.text)
            assert answer.json()["field"] == field, answer.json()
        missing = await team.post(
            "/v1/jobs/never:backfill",
            json={"from": "2026-06-01T00:00:00Z", "to": "2026-06-02T00:00:00Z"},
        )
        assert missing.status_code == 404


async def test_the_cli_backfills_and_previews(api_server: ApiServer) -> None:
    async with client(api_server) as team:
        await team.put("/v1/jobs/nightly", json={"schedule": {"cron": "30 2 * * *"}})

    def tickwork(*args: str) -> Any:
        env = {"TICKWORK_URL": api_server.url, "TICKWORK_TOKEN": api_server.team_token}
        return CliRunner().invoke(cli, ["backfill", "nightly", *args], env=env)

    span = ("--from", "2026-06-01T00:00:00Z", "--to", "2026-06-04T00:00:00Z")
    dry = await asyncio.to_thread(tickwork, *span, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.split() == [f"2026-06-0{d}T02:30:00Z" for d in (1, 2, 3)]
    assert "3 fire time(s); 0 have a run already, 3 would be made" in dry.stderr
    made = await asyncio.to_thread(tickwork, *span)
    assert made.stdout.strip() == "nightly: 3 run(s) made, 0 fire time(s) had one already"
    again = await asyncio.to_thread(tickwork, *span, "--json")
    assert json.loads(again.stdout)["created"] == 0
