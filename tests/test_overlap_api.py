"""spec.overlapPolicy as a team sees it: the HTTP API takes and shows it, the Job shows
the fires Forbid skipped (overlapSkipped), and so does the dashboard's job page."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
from conftest import TEAM_TOKEN, served, services_over

from tickwork.core.clock import FrozenClock
from tickwork.core.spec import JobSpec, OverlapPolicy, Schedule
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.jobs import Jobs
from tickwork.engine.scheduler import Scheduler
from tickwork.store.database import Database

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
async def url(database: Database) -> AsyncIterator[str]:
    """The API with the dashboard."""
    services = services_over(database, auth_failure_rate=0, ui_secret="test-secret-" + "x" * 32)
    async with served(services) as address:
        yield address


async def test_the_api_and_the_dashboard_show_the_policy_and_the_fires_it_skipped(
    url: str, database: Database, clock: FrozenClock
) -> None:
    headers = {"Authorization": f"Bearer {TEAM_TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as team:
        wrong = await team.put("/v1/jobs/nightly", json={"overlapPolicy": "forbid"})
        assert wrong.status_code == 400
        assert wrong.json()["field"] == "overlapPolicy"
        made = await team.put(
            "/v1/jobs/nightly",
            json={"schedule": {"cron": "0 2 * * *"}, "overlapPolicy": "Replace"},
        )
        assert made.status_code == 201, made.text
        assert made.json()["spec"]["overlapPolicy"] == "Replace"
        plain = await team.put("/v1/jobs/plain", json={})
        assert plain.json()["spec"]["overlapPolicy"] == "Allow"

    # An hourly Forbid job whose 02:00 run still holds its lease at 03:00.
    jobs = Jobs(database, clock)
    spec = JobSpec(
        schedule=Schedule(cron="0 * * * *", jitter_seconds=0),
        overlap_policy=OverlapPolicy.Forbid,
        timeout_seconds=7200,
    )
    await jobs.put("acme", "report", spec, "test")
    scheduler = Scheduler(database, clock=clock)
    clock.advance(3600)  # 02:00
    await scheduler.pass_once()
    leased = await Dispatcher(database, clock).lease(
        ["default"], limit=1, worker_id="w1", lease_seconds=7200
    )
    assert len(leased) == 1
    clock.advance(3570)
    await scheduler.pass_once()
    clock.advance(30)  # 03:00
    await scheduler.pass_once()

    async with httpx.AsyncClient(base_url=url, headers=headers) as team:
        job = (await team.get("/v1/jobs/report")).json()
        assert (job["spec"]["overlapPolicy"], job["overlapSkipped"]) == ("Forbid", 1)
        runs = (await team.get("/v1/jobs/report/runs")).json()["items"]
        assert sorted(run["state"] for run in runs) == ["leased", "skipped"]

    async with httpx.AsyncClient(base_url=url) as browser:
        form = await browser.get("/ui/login")
        found = _CSRF.search(form.text)
        assert found is not None
        signed = await browser.post(
            "/ui/login", data={"token": TEAM_TOKEN, "csrf": found.group(1), "next": "/ui/"}
        )
        assert signed.status_code == 303
        page = (await browser.get("/ui/jobs/report")).text
        overlap = re.search(r"<dt>Overlap</dt><dd>(.*?)</dd>", page, re.S)
        assert overlap is not None
        shown = re.sub(r"<[^>]+>", "", overlap.group(1))
        assert shown == (
            "Forbid: a fire is skipped while an earlier run of the job is running; "
            "1 fire skipped so far"
        )
        plain = (await browser.get("/ui/jobs/plain")).text
        assert "<dt>Overlap</dt>" not in plain  # no schedule: the policy never applies
