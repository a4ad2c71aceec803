"""A job's DST policy on the dashboard's job page: the policy in force, each choice
said to be the job's own or the default, and the next fire times it gives, marked."""

from __future__ import annotations

from conftest import TEAM_TOKEN

from .conftest import UiServer, make_job, signed_in


async def test_the_job_page_shows_the_policy_and_the_fire_times_it_gives(
    dashboard: UiServer,
) -> None:
    berlin = {"cron": "30 2 * * *", "timeZone": "Europe/Berlin", "jitterSeconds": 0}
    await make_job(dashboard, "acme", "nightly", schedule=berlin)
    await make_job(dashboard, "acme", "both", schedule={**berlin, "dst": {"repeated": "both"}})
    autumn = {"from": "2026-10-24T12:00:00"}
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        plain = (await client.get("/ui/jobs/nightly", params=autumn)).text
        both = (await client.get("/ui/jobs/both", params=autumn)).text

    assert (
        'a repeated local time runs <code>first</code>: at its first occurrence <span class="'
        'quiet">(default)</span>; a local time that does not exist <code>shift</code>: runs at '
        'the end of the gap <span class="quiet">(default)</span>'
    ) in plain
    assert '<time datetime="2026-10-25T00:30:00Z">' in plain
    assert '<time datetime="2026-10-25T01:30:00Z">' not in plain
    assert "runs once, at the first (CEST)" in plain

    assert "runs <code>both</code>: at both occurrences; a local time" in both
    assert '<time datetime="2026-10-25T00:30:00Z">' in both
    assert '<time datetime="2026-10-25T01:30:00Z">' in both
    assert "runs at both, this is the second (CET)" in both
