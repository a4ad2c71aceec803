"""The dashboard in a real browser: Debian's Chromium driven by Playwright.

Without a Chromium these tests skip, saying why; under ``CI=true`` a missing browser
fails the run instead. ``TICKWORK_SCREENSHOTS=DIR`` keeps a screenshot of every page at
desktop and phone widths in DIR (the screenshots of docs/dashboard.md come from there).
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from bulk_seeding import seed_dead
from conftest import ADMIN_TOKEN, TEAM_TOKEN

from tickwork.core.clock import FrozenClock
from tickwork.core.records import Outcome
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.store import operations as store

from .conftest import UiServer, dead_run, enqueue, finish, lease_one, make_job

playwright_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.browser, pytest.mark.timeout(60)]

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
WAIT_MS = 10_000  # what a step may take on a busy 2-core machine before the test fails


def chromium_path() -> str | None:
    found = shutil.which("chromium") or "/usr/bin/chromium"
    return found if os.path.exists(found) else None


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Any]:
    path = chromium_path()
    if path is None:
        reason = "no Chromium: install Debian's chromium package (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    async with playwright_api.async_playwright() as driver:
        launched = await driver.chromium.launch(
            executable_path=path, args=CHROMIUM_FLAGS, headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Any]:
    context = await browser.new_context(viewport=DESKTOP)
    opened = await context.new_page()
    opened.set_default_timeout(WAIT_MS)
    try:
        yield opened
    finally:
        await context.close()


async def sign_in(page: Any, server: UiServer, token: str, path: str = "/ui/") -> None:
    await page.goto(server.url + path)
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await page.wait_for_url(lambda url: "/ui/login" not in url)


def expect(locator: Any) -> Any:
    return playwright_api.expect(locator)


async def test_sign_in_then_sign_out(page: Any, dashboard: UiServer) -> None:
    await make_job(dashboard, "acme", "nightly", schedule={"cron": "30 2 * * *"})
    await page.goto(dashboard.url + "/ui/jobs")
    assert "/ui/login" in page.url
    await page.fill("#token", "not-a-token-at-all")
    await page.click("button[type=submit]")
    await expect(page.locator(".flash.error")).to_have_text("unknown token")
    await page.fill("#token", TEAM_TOKEN)
    await page.keyboard.press("Enter")
    await page.wait_for_url(dashboard.url + "/ui/jobs")
    await expect(page.locator(".subject")).to_contain_text("acme-team")
    await expect(page.locator("tr[data-job=nightly]")).to_be_visible()
    cookies = await page.context.cookies()
    session = next(c for c in cookies if c["name"] == "tickwork_session")
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert TEAM_TOKEN not in session["value"]
    await page.click("text=Sign out")
    await expect(page.locator(".flash.ok")).to_have_text("Signed out.")
    await page.goto(dashboard.url + "/ui/jobs")
    assert "/ui/login" in page.url


async def test_a_team_never_sees_another_teams_jobs(page: Any, dashboard: UiServer) -> None:
    await make_job(dashboard, "acme", "acme-billing")
    await make_job(dashboard, "globex", "globex-payroll")
    await dead_run(dashboard, "globex", "globex-payroll", "globex secret error")
    await sign_in(page, dashboard, TEAM_TOKEN, "/ui/jobs")
    await expect(page.locator("tr[data-job=acme-billing]")).to_be_visible()
    assert await page.locator("text=globex-payroll").count() == 0
    await page.goto(dashboard.url + "/ui/dlq")
    await expect(page.locator(".empty")).to_contain_text("The DLQ is empty")
    await page.goto(dashboard.url + "/ui/jobs?tenant=globex")
    await expect(page.locator(".flash.error")).to_contain_text("acts for tenant 'acme'")
    assert await page.locator("text=globex-payroll").count() == 0


async def test_an_admin_switches_tenant(page: Any, dashboard: UiServer) -> None:
    await make_job(dashboard, "globex", "globex-payroll")
    await sign_in(page, dashboard, ADMIN_TOKEN, "/ui/jobs")
    await expect(page.locator(".empty")).to_contain_text("has no jobs yet")
    await page.fill("#tenant-picker", "globex")
    await page.click("text=Switch")
    await expect(page.locator("tr[data-job=globex-payroll]")).to_be_visible()
    assert "tenant=globex" in page.url
    await page.click("tr[data-job=globex-payroll] a.job-link")
    await expect(page.locator("h1")).to_contain_text("globex-payroll")
    assert "tenant=globex" in page.url


async def test_pause_and_resume(page: Any, dashboard: UiServer) -> None:
    await make_job(dashboard, "acme", "nightly", schedule={"cron": "30 2 * * *"})
    await sign_in(page, dashboard, TEAM_TOKEN, "/ui/jobs")
    row = page.locator("tr[data-job=nightly]")
    await row.locator("button", has_text="Pause").click()
    await expect(page.locator(".flash.ok")).to_have_text("Paused nightly.")
    await expect(row.locator(".badge.warn")).to_have_text("paused")
    assert (await dashboard.jobs.get("acme", "nightly")).definition.paused
    await row.locator("button", has_text="Resume").click()
    await expect(page.locator(".flash.ok")).to_have_text("Resumed nightly.")
    assert not (await dashboard.jobs.get("acme", "nightly")).definition.paused


async def test_a_forged_form_is_refused(page: Any, dashboard: UiServer) -> None:
    await make_job(dashboard, "acme", "nightly")
    await sign_in(page, dashboard, TEAM_TOKEN, "/ui/jobs/nightly")
    await page.eval_on_selector_all(
        "input[name=csrf]", "inputs => inputs.forEach(i => { i.value = 'forged'; })"
    )
    await page.locator(".title-row button", has_text="Pause").click()
    await expect(page.locator("h1")).to_have_text("Form refused")
    await expect(page.locator(".flash.error")).to_contain_text("CSRF")
    assert not (await dashboard.jobs.get("acme", "nightly")).definition.paused


async def test_replaying_from_the_dlq_enqueues_the_run_again(
    page: Any, dashboard: UiServer
) -> None:
    await make_job(dashboard, "acme", "poison")
    dead = await dead_run(dashboard, "acme", "poison", "disk full")
    await sign_in(page, dashboard, TEAM_TOKEN, "/ui/dlq")
    row = page.locator(f"tr[data-run='{dead.run_id}']")
    await expect(row).to_contain_text("disk full")
    await row.locator("input[type=checkbox]").check()
    await page.click("text=Replay selected")
    await expect(page.locator("h1")).to_have_text("Replay 1 dead run?")
    await page.click("button:has-text('Replay 1 run')")
    await expect(page.locator(".flash.ok")).to_have_text("Replayed 1 run.")
    await expect(page.locator(".empty")).to_contain_text("The DLQ is empty")
    # Really enqueued again: a worker leases it, with a fresh attempt budget.
    again = await lease_one(dashboard, "acme")
    assert again.run_id == dead.run_id and again.attempt == 1


async def test_the_fire_times_of_a_berlin_job_mark_dst(page: Any, dashboard: UiServer) -> None:
    await make_job(
        dashboard,
        "acme",
        "berlin-report",
        schedule={"cron": "30 2 * * *", "timeZone": "Europe/Berlin", "jitterSeconds": 0},
    )
    await sign_in(page, dashboard, TEAM_TOKEN, "/ui/jobs/berlin-report?from=2026-03-27T12:00")
    gap = page.locator("table.fires tr.dst-gap")
    await expect(gap).to_have_count(1)
    await expect(gap).to_contain_text("2026-03-29 03:00 CEST")
    await expect(gap).to_contain_text("DST gap")
    await expect(gap).to_contain_text("02:30 does not exist on Sun 29 Mar")
    await expect(page.locator("table.fires tbody tr")).to_have_count(10)
    await page.fill("#from", "2026-10-24T12:00:00")
    await page.click("text=Preview")
    overlap = page.locator("table.fires tr.dst-overlap")
    await expect(overlap).to_have_count(1)
    await expect(overlap).to_contain_text("2026-10-25 02:30 CEST")
    await expect(overlap).to_contain_text("runs once, at the first")
    assert "from=2026-10-24T12%3A00" in page.url  # a link to share


async def test_a_run_finishing_shows_up_without_a_reload(page: Any, dashboard: UiServer) -> None:
    await make_job(dashboard, "acme", "export")
    run = await enqueue(dashboard, "acme", "export", payload={"format": "csv"})
    lease = await lease_one(dashboard, "acme")
    await sign_in(page, dashboard, TEAM_TOKEN, f"/ui/runs/{run.run_id}")
    await expect(page.locator("h1 .badge").first).to_have_text("leased")
    await expect(page.locator("table.attempts")).to_contain_text(str(lease.fencing_token))
    await page.evaluate("window.__sameDocument = true")
    await finish(dashboard, lease)
    await expect(page.locator("h1 .badge").first).to_have_text("succeeded")
    await expect(page.locator("table.attempts")).to_contain_text("succeeded")
    assert await page.evaluate("window.__sameDocument === true")  # no navigation happened


async def _populate(server: UiServer) -> dict[str, str]:
    """A tenant with an hour of history: runs that succeeded, failed, died, and one
    running now, from a clock moved minute by minute through the last hour."""
    await make_job(
        server,
        "acme",
        "nightly-report",
        schedule={"cron": "30 2 * * *", "timeZone": "Europe/Berlin"},
        retry={"maxAttempts": 3},
    )
    await make_job(server, "acme", "hello", schedule={"cron": "* * * * *"}, priority="critical")
    await make_job(server, "acme", "poison-pill", priority="bulk")
    await make_job(server, "acme", "flaky-export", queue="billing", paused=True)
    now = datetime.now(UTC).replace(microsecond=0)
    clock = FrozenClock(now - timedelta(minutes=58))
    jobs, dispatcher = Jobs(server.database, clock), Dispatcher(server.database, clock)
    for minute in range(0, 56, 2):
        clock.set(now - timedelta(minutes=58 - minute))
        for _ in range(3 + round(2 * math.sin(minute / 6))):
            await jobs.enqueue("acme", "hello", EnqueueRequest(), "demo")
        clock.advance(0.4)
        leases = await dispatcher.lease(
            ["default"], limit=10, worker_id="worker-a1", lease_seconds=30, tenant="acme"
        )
        clock.advance(1.5)
        items = [
            CompleteItem(
                lease.run_id,
                lease.fencing_token,
                Outcome.failed if index == 0 and minute % 9 == 0 else Outcome.succeeded,
                {"message": "upstream timed out"} if index == 0 and minute % 9 == 0 else None,
            )
            for index, lease in enumerate(leases)
        ]
        await dispatcher.complete(items)
    dead = await dead_run(server, "acme", "poison-pill", "ValueError: row 17 has no <id>")
    await dead_run(server, "acme", "poison-pill", "KeyError: 'customer'")
    running = await enqueue(server, "acme", "nightly-report", payload={"format": "csv"})
    await lease_one(server, "acme")
    await server.scheduler.pass_once()  # the Shards table shows an owner and its last pass
    return {"dead": dead.run_id, "running": running.run_id}


@pytest.fixture
def screenshots() -> Path | None:
    """Where to keep the screenshots (none unless ``TICKWORK_SCREENSHOTS`` says)."""
    named = os.environ.get("TICKWORK_SCREENSHOTS")
    if not named:
        return None
    folder = Path(named)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def test_every_page_reads_at_desktop_and_phone_width(
    browser: Any, dashboard: UiServer, screenshots: Path | None
) -> None:
    ids = await _populate(dashboard)
    folder = screenshots
    pages = {
        "overview": "/ui/",
        "jobs": "/ui/jobs",
        "job": "/ui/jobs/nightly-report?from=2026-03-27T12:00",
        "run": f"/ui/runs/{ids['running']}",
        "dlq": "/ui/dlq",
        "audit": "/ui/audit",
    }
    for size_name, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        context = await browser.new_context(viewport=viewport)
        opened = await context.new_page()
        opened.set_default_timeout(WAIT_MS)
        try:
            await opened.goto(dashboard.url + "/ui/login")
            if folder is not None:
                await opened.screenshot(path=str(folder / f"login-{size_name}.png"))
            await sign_in(opened, dashboard, TEAM_TOKEN)
            for name, path in pages.items():
                await opened.goto(dashboard.url + path)
                await expect(opened.locator("main h1")).to_be_visible()
                overflow = await opened.evaluate(
                    "document.documentElement.scrollWidth - window.innerWidth"
                )
                assert overflow <= 1, f"{name} is {overflow}px wider than a {size_name}"
                if folder is not None:
                    shot = folder / f"{name}-{size_name}.png"
                    await opened.screenshot(path=str(shot), full_page=True)
        finally:
            await context.close()


async def test_replay_all_matching_follows_the_operation_live(
    browser: Any, dashboard: UiServer, screenshots: Path | None
) -> None:
    died = datetime.now(UTC) - timedelta(hours=1)
    shard = await seed_dead(dashboard.database, "acme", "export-a", 60, died, "Timeout to S3")
    await seed_dead(dashboard.database, "acme", "report", 3, died, "boom")
    context = await browser.new_context(viewport=DESKTOP)
    opened = await context.new_page()
    opened.set_default_timeout(WAIT_MS)

    async def shot(name: str) -> None:
        if screenshots is not None:
            await opened.screenshot(path=str(screenshots / f"{name}.png"), full_page=True)

    try:
        await sign_in(opened, dashboard, TEAM_TOKEN, "/ui/runs?job=export-*&errorContains=timeout")
        await expect(opened.locator(".bulk-bar .count")).to_contain_text("60 dead runs match")
        await shot("runs-desktop")
        await opened.click("text=Replay all 60 matching")
        await expect(opened.locator("h1")).to_have_text("Replay all 60 matching runs?")
        await shot("bulk-confirm-desktop")
        await opened.click("button:has-text('Replay all 60')")
        await expect(opened.locator(".flash.ok")).to_contain_text("Replay of 60 runs started")
        operation_id = opened.url.rsplit("/", 1)[1]
        async with dashboard.database.connection(shard) as conn:
            await store.work_batch(conn, operation_id, 25)
        progress = opened.locator(".progress-line")
        await expect(progress).to_contain_text("25 of 60 runs replayed · 41%")  # no reload
        await shot("operation-running-desktop")
        await dashboard.scheduler.pass_once()
        await expect(progress).to_contain_text("60 of 60 runs replayed · 100%")
        await expect(progress.locator(".badge")).to_have_text("done")
        await expect(opened.locator("button", has_text="Stop")).to_have_count(0)
        await shot("operation-done-desktop")
    finally:
        await context.close()
