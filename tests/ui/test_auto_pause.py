"""The dashboard's job page says why tickwork paused a job (pauseAfterFailures), links
the last dead run, and its Resume button ends the pause."""

from __future__ import annotations

import re

from conftest import TEAM_TOKEN

from .conftest import UiServer, csrf_of, dead_run, make_job, signed_in


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


async def test_the_job_page_shows_the_auto_pause_and_resume_ends_it(
    dashboard: UiServer,
) -> None:
    await make_job(dashboard, "acme", "nightly", pauseAfterFailures=2)
    await dead_run(dashboard, "acme", "nightly", "disk full")
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = (await client.get("/ui/jobs/nightly")).text
        assert "1 of 2 consecutive dead runs before tickwork pauses the job" in _text(page)
        last = await dead_run(dashboard, "acme", "nightly", "credentials revoked")
        page = (await client.get("/ui/jobs/nightly")).text
        shown = _text(page)
        assert "paused by tickwork After 2 consecutive dead runs" in shown
        assert "failed with: credentials revoked" in shown
        assert f'href="/ui/runs/{last.run_id}"' in page
        done = await client.post(
            "/ui/jobs/nightly/resume", data={"csrf": csrf_of(page), "next": "/ui/jobs/nightly"}
        )
        assert done.status_code == 303
        page = (await client.get("/ui/jobs/nightly")).text
        assert "paused by tickwork" not in page
    assert not (await dashboard.jobs.get("acme", "nightly")).definition.paused
