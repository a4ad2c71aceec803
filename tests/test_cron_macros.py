"""Vixie's cron macros (``@daily`` ...) through the HTTP API and the scheduler: kept as
written, run at the times of the five fields ``docs/cron.md`` says they stand for (the
schedule, the spec, the preview and the dashboard's words are checked in
tests/unit/test_cron_macros.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
from conftest import ApiServer

from tickwork.core import cron, spec
from tickwork.core.clock import FrozenClock
from tickwork.core.spec import JobSpec
from tickwork.engine.jobs import Jobs
from tickwork.engine.scheduler import Scheduler
from tickwork.store.database import Database

# Midnight is when Havana changed its clocks in 2018: 00:00 did not exist on 11 March.
HAVANA = "America/Havana"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


async def test_the_api_stores_the_macro_and_schedules_its_fields(api_server: ApiServer) -> None:
    headers = api_server.headers(api_server.team_token)
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as team:
        body = {"schedule": {"cron": "@daily", "timeZone": "Europe/Berlin", "jitterSeconds": 0}}
        created = await team.put("/v1/jobs/nightly", json=body)
        assert created.status_code == 201, created.text
        job = created.json()
        assert job["spec"]["schedule"]["cron"] == "@daily"
        assert (await team.get("/v1/jobs/nightly")).json()["spec"]["schedule"]["cron"] == "@daily"
        # The next fire time is the next midnight in Berlin after the job was created.
        created_at = utc(job["createdAt"])
        expected = cron.CronSchedule.parse("0 0 * * *", "Europe/Berlin").next_after(created_at)
        assert utc(job["nextRunAt"]) == expected

        refused = await team.put("/v1/jobs/every", json={"schedule": {"cron": "@every 10m"}})
        assert refused.status_code == 400
        problem = refused.json()
        assert problem["type"].endswith("/invalid-schedule")
        assert "write it as the cron step '*/10 * * * *'" in problem["detail"]


async def test_the_scheduler_runs_a_macro_at_its_fields_times(database: Database) -> None:
    """@daily in Havana across the 2018 spring-forward at midnight: the runs' dueAt are
    the five fields' times, the one of the missing 00:00 at 01:00 CDT."""
    clock = FrozenClock(utc("2018-03-10T12:00:00Z"))
    jobs = Jobs(database, clock)
    job = spec.parse(
        JobSpec, {"schedule": {"cron": "@daily", "timeZone": HAVANA, "jitterSeconds": 0}}
    )
    await jobs.put("acme", "nightly", job, "alice")
    scheduler = Scheduler(database, clock=clock)
    due: list[datetime] = []
    # A pass just before each expected fire time inserts that run (a minute ahead); a
    # fire time the scheduler put elsewhere would show as a catch-up or a missing run.
    for instant in ("2018-03-11T04:59:30Z", "2018-03-12T03:59:30Z", "2018-03-13T03:59:30Z"):
        clock.set(utc(instant))
        await scheduler.pass_once()
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            rows = await conn.fetch("SELECT due_at FROM runs WHERE job = 'nightly'")
            due += [row["due_at"] for row in rows]
    assert sorted(due) == [
        utc("2018-03-11T05:00:00Z"),
        utc("2018-03-12T04:00:00Z"),
        utc("2018-03-13T04:00:00Z"),
    ]
    stored = (await jobs.get("acme", "nightly")).definition
    assert stored.spec.to_document()["schedule"]["cron"] == "@daily"
    assert stored.next_due_at == utc("2018-03-14T04:00:00Z")
