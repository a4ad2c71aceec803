"""A job on a cron macro in the dashboard: the macro as written, its words and its next
fire times with their DST marks, as for the five fields it stands for."""

from __future__ import annotations

from conftest import TEAM_TOKEN

from .conftest import UiServer, make_job, signed_in


async def test_the_job_page_shows_the_macro_its_words_and_its_fire_times(
    dashboard: UiServer,
) -> None:
    # Havana changed its clocks at midnight: 00:00 did not exist on 11 March 2018.
    schedule = {"cron": "@daily", "timeZone": "America/Havana", "jitterSeconds": 0}
    await make_job(dashboard, "acme", "nightly", schedule=schedule)
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        listed = await client.get("/ui/jobs")
        assert "At 00:00<br><code>@daily</code>" in listed.text
        page = await client.get("/ui/jobs/nightly", params={"from": "2018-03-10T12:00:00"})
    assert page.status_code == 200
    html = page.text
    assert "<dt>In words</dt><dd>At 00:00 " in html
    assert "<code>@daily</code> in <strong>America/Havana</strong>" in html
    assert '<time datetime="2018-03-11T05:00:00Z">' in html
    assert "00:00 does not exist on Sun 11 Mar (clocks go forward 00:00 → 01:00); " in html
    assert '<time datetime="2018-03-12T04:00:00Z">' in html
