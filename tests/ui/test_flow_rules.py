"""The dashboard shows a job's unique or debounce rule, and says when Run now was
answered by the rule with a run the job already had."""

from __future__ import annotations

from conftest import TEAM_TOKEN

from .conftest import UiServer, csrf_of, make_job, shown, signed_in


async def test_the_job_page_shows_the_rule_and_run_now_says_deduplicated(
    dashboard: UiServer,
) -> None:
    await make_job(
        dashboard,
        "acme",
        "sync",
        unique={"forSeconds": 600, "states": ["scheduled", "ready", "retry_wait", "succeeded"]},
    )
    await make_job(dashboard, "acme", "reindex", debounce={"key": "/doc", "seconds": 30})
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = await client.get("/ui/jobs/sync")
        assert shown(page.text, "Unique") == (
            "one run per job: an enqueue whose key a run holds (scheduled, ready, retry_wait, "
            "succeeded; finished ones for 10 min) gets that run, deduplicated"
        )
        token = csrf_of(page.text)
        for _ in range(2):
            done = await client.post(
                "/ui/jobs/sync/enqueue", data={"csrf": token, "next": "/ui/jobs/sync"}
            )
            assert done.status_code == 303
        runs, _ = await dashboard.jobs.runs_of_job("acme", "sync", None, None, 5)
        assert len(runs) == 1
        assert (
            f"Deduplicated: run {runs[0].run_id} of sync (ready) holds the unique key of this "
            "enqueue; no run was made." in (await client.get("/ui/jobs/sync")).text
        )

        debounce = shown((await client.get("/ui/jobs/reindex")).text, "Debounce")
        assert debounce.startswith("one run per burst of key /doc: it starts 30 s after")
        assert "5 min after the first" in debounce
