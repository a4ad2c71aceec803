"""The dashboard's job page says a job's concurrency limit and rate limit in words, and
how many of its ready runs they hold back now."""

from __future__ import annotations

from conftest import TEAM_TOKEN

from .conftest import UiServer, enqueue, lease_one, make_job, shown, signed_in


async def test_the_job_page_shows_its_limits_and_the_runs_they_hold_back(
    dashboard: UiServer,
) -> None:
    await make_job(
        dashboard,
        "acme",
        "deploy",
        concurrency=1,
        concurrencyKey={"key": "/environment", "group": "deploys", "strategy": "CancelRunning"},
    )
    await make_job(
        dashboard,
        "acme",
        "mail",
        queue="mail",
        rateLimit={"limit": 2, "periodSeconds": 60, "key": "/customer/id"},
    )
    await make_job(dashboard, "acme", "plain")
    await make_job(dashboard, "acme", "capped", concurrency=3)
    for _ in range(3):
        await enqueue(dashboard, "acme", "mail", {"customer": {"id": 7}})
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = (await client.get("/ui/jobs/deploy")).text
        assert shown(page, "Concurrency") == (
            "1 at a time per key /environment, shared by group deploys; CancelRunning: "
            "a newer run asks the oldest running one to stop"
        )
        assert shown(page, "Held back") == "none now"
        assert "<dt>Rate limit</dt>" not in page

        page = (await client.get("/ui/jobs/mail")).text
        assert shown(page, "Rate limit") == "at most 2 runs leased per 1 min, per key /customer/id"
        assert "<dt>Concurrency</dt>" not in page
        assert shown(page, "Held back") == "none now"
        # Two leased: the window of customer 7 is used up, the third run waits.
        await lease_one(dashboard, "acme", "mail")
        await lease_one(dashboard, "acme", "mail")
        page = (await client.get("/ui/jobs/mail")).text
        assert shown(page, "Held back") == ("1 ready run held by the rate limit; no attempt used")

        page = (await client.get("/ui/jobs/capped")).text
        assert shown(page, "Concurrency") == "3 at a time: runs over the limit wait their turn"

        page = (await client.get("/ui/jobs/plain")).text
        for term in ("Concurrency", "Rate limit", "Held back"):
            assert f"<dt>{term}</dt>" not in page
