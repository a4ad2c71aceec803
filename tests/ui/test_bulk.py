"""Bulk operations in the dashboard: runs by state across jobs, replay, discard or
cancel of every run matching a filter (not only the page), and an operation's page."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx
from bulk_seeding import seed_dead, seed_scheduled, states
from conftest import ADMIN_TOKEN, OTHER_TEAM_TOKEN, TEAM_TOKEN

from tickwork.engine import audit
from tickwork.engine.operations import Operations

from .conftest import UiServer, csrf_of, signed_in

_OPERATION = re.compile(r"^/ui/operations/(op-[0-9a-f]+)$")
# Within the retention of finished runs, and not due yet: a scheduler pass keeps both.
DIED = datetime.now(UTC) - timedelta(hours=1)
DUE = datetime.now(UTC) + timedelta(days=1)


async def _seed(server: UiServer) -> None:
    # 60 dead runs of export-a: more than one page (50) of the DLQ and of Runs.
    await seed_dead(server.database, "acme", "export-a", 60, DIED, "Timeout talking to S3")
    await seed_dead(server.database, "acme", "export-b", 4, DIED, "timeout")
    await seed_dead(server.database, "acme", "report", 3, DIED, "boom")
    await seed_dead(server.database, "globex", "export-a", 5, DIED, "timeout")


async def _operation_of(answer: httpx.Response) -> str:
    assert answer.status_code == 303, answer.text
    found = _OPERATION.match(answer.headers["location"])
    assert found, answer.headers["location"]
    return found.group(1)


async def test_runs_by_state_counts_every_matching_run_not_the_page(dashboard: UiServer) -> None:
    await _seed(dashboard)
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = await client.get("/ui/runs?state=dead&job=export-*&errorContains=timeout")
        assert page.status_code == 200
        assert '<strong class="num">64</strong> dead runs match' in page.text
        assert page.text.count('<tr data-run="') == 50  # one page shown...
        assert "Replay all 64 matching" in page.text  # ...every match acted on
        assert "Discard all 64 matching" in page.text and "Cancel all" not in page.text
        assert 'rel="next"' in page.text and ">report<" not in page.text
        older = re.search(r'href="([^"]*cursor=[^"]*)" rel="next"', page.text)
        assert older is not None
        second = await client.get(older.group(1).replace("&amp;", "&"))
        assert second.text.count('<tr data-run="') == 14
        dlq = await client.get("/ui/dlq")
        assert "Replay all 67 matching" in dlq.text  # every dead run of acme, not globex's
        narrowed = await client.get("/ui/dlq?job=report")
        assert "Discard all 3 matching" in narrowed.text
        ready = await client.get("/ui/runs?state=ready")
        assert "No ready run in tenant acme" in ready.text
        nav = await client.get("/ui/")
        assert 'href="/ui/runs"' in nav.text and 'href="/ui/operations"' in nav.text


async def test_replay_all_matching_is_confirmed_then_done_by_the_scheduler(
    dashboard: UiServer,
) -> None:
    await _seed(dashboard)
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = await client.get("/ui/dlq?job=export-a")
        token = csrf_of(page.text)
        filter_fields = {"state": "dead", "job": "export-a", "errorContains": "s3"}
        confirm = await client.post(
            "/ui/operations/confirm",
            data={"csrf": token, "action": "replay", "next": "/ui/dlq"} | filter_fields,
        )
        assert confirm.status_code == 200
        assert "Replay all 60 matching runs?" in confirm.text
        assert "<dt>Job</dt><dd>export-a</dd>" in confirm.text
        assert "<dt>Last error contains</dt><dd>s3</dd>" in confirm.text
        assert await states(dashboard.database, "acme") == {"dead": 67}  # nothing yet
        made = await client.post(
            "/ui/operations", data={"csrf": token, "action": "replay"} | filter_fields
        )
        operation_id = await _operation_of(made)
        running = await client.get(f"/ui/operations/{operation_id}")
        assert f"Replay of 60 runs started as {operation_id}." in running.text
        assert '<span class="badge info">running</span>' in running.text
        assert re.search(
            r'<strong class="num">0</strong> of <strong class="num">60</strong>', running.text
        )
        assert "Stop…" in running.text
        await dashboard.scheduler.pass_once()
        done = await client.get(f"/ui/operations/{operation_id}", headers={"X-Tickwork-Live": "1"})
        assert "<html" not in done.text  # the live region alone, as the page polls it
        assert '<span class="badge good">done</span>' in done.text
        assert re.search(
            r'<strong class="num">60</strong> of <strong class="num">60</strong>', done.text
        )
        assert "100%" in done.text and "Stop…" not in done.text
        listed = await client.get("/ui/operations")
        assert listed.text.count('href="/ui/operations/op-') == 1
    assert await states(dashboard.database, "acme") == {"ready": 60, "dead": 7}
    assert await states(dashboard.database, "globex") == {"dead": 5}
    entries, _ = await audit.entries(dashboard.database, "acme", "export-a", None, 5)
    assert [(e.action, e.actor) for e in entries[:1]] == [("bulk-replay", "acme-team")]


async def test_cancel_all_matching_and_stopping_an_operation(dashboard: UiServer) -> None:
    await seed_scheduled(dashboard.database, "acme", "nightly", 7, DUE, DIED)
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = await client.get("/ui/runs?state=scheduled")
        assert '<strong class="num">7</strong> scheduled runs match' in page.text
        assert "Cancel all 7 matching" in page.text and "Replay all" not in page.text
        token = csrf_of(page.text)
        made = await client.post(
            "/ui/operations",
            data={"csrf": token, "action": "cancel", "state": "scheduled", "job": "nightly"},
        )
        operation_id = await _operation_of(made)
        confirm = await client.post(
            f"/ui/operations/{operation_id}/confirm-cancel", data={"csrf": token}
        )
        assert confirm.status_code == 200 and "Stop operation" in confirm.text
        assert "0 of 7 runs" in confirm.text
        stopped = await client.post(f"/ui/operations/{operation_id}/cancel", data={"csrf": token})
        assert stopped.status_code == 303
        shown = await client.get(stopped.headers["location"])
        assert f"Stopped {operation_id} after 0 of 7 runs" in shown.text
        assert '<span class="badge warn">cancelled</span>' in shown.text
        await dashboard.scheduler.pass_once()
    assert await states(dashboard.database, "acme") == {"scheduled": 7}


async def test_bad_filter_values_are_a_notice_naming_the_field(dashboard: UiServer) -> None:
    await _seed(dashboard)
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        for query, said in [
            ("state=bogus", "state must be one of"),
            ("minAttempts=lots", "minAttempts must be a whole number"),
            ("from=yesterday", "from: &#39;yesterday&#39; is not a date and time"),
            ("job=Export_A", "job"),
            ("from=2026-03-15T00:00:00&to=2026-03-14T00:00:00", "from must be before to"),
        ]:
            page = await client.get(f"/ui/runs?{query}")
            assert page.status_code == 400, query
            assert said in page.text, query
            assert 'class="flash error"' in page.text and 'id="state"' in page.text
        token = csrf_of(page.text)
        refused = await client.post(
            "/ui/operations/confirm",
            data={"csrf": token, "action": "replay", "state": "ready", "next": "/ui/runs"},
        )
        assert refused.status_code == 303 and refused.headers["location"] == "/ui/runs"
        shown = await client.get("/ui/runs")
        assert "replay acts on runs that are dead" in shown.text
        nothing = await client.post(
            "/ui/operations",
            data={"csrf": token, "action": "explode", "state": "dead", "next": "/ui/dlq"},
        )
        assert nothing.status_code == 303
        assert "choose replay, discard or cancel" in (await client.get("/ui/dlq")).text
    assert await Operations(dashboard.database).recent("acme", 10) == []


async def test_csrf_and_tenancy_guard_bulk_actions(dashboard: UiServer) -> None:
    await _seed(dashboard)
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = await client.get("/ui/dlq")
        forged = await client.post("/ui/operations", data={"action": "replay", "state": "dead"})
        assert forged.status_code == 403 and "Form refused" in forged.text
        made = await client.post(
            "/ui/operations",
            data={"csrf": csrf_of(page.text), "action": "discard", "job": "report"},
        )
        operation_id = await _operation_of(made)
    async with signed_in(dashboard, OTHER_TEAM_TOKEN) as client:
        theirs = await client.get(f"/ui/operations/{operation_id}")
        assert theirs.status_code == 404
        assert operation_id not in (await client.get("/ui/operations")).text
        page = await client.get("/ui/dlq")
        token = csrf_of(page.text)
        stop = await client.post(f"/ui/operations/{operation_id}/cancel", data={"csrf": token})
        assert stop.status_code == 303
        assert "no operation" in (await client.get("/ui/dlq")).text
        other = await client.post(
            "/ui/operations",
            data={"csrf": token, "action": "replay", "tenant": "acme", "state": "dead"},
        )
        assert other.status_code == 403 and "acts for tenant" in other.text
        own = await client.get("/ui/runs?state=dead&job=export-a")
        assert '<strong class="num">5</strong> dead runs match' in own.text
    found = await Operations(dashboard.database).get("acme", operation_id)
    assert found.state.value == "running" and found.total == 3
    assert await states(dashboard.database, "acme") == {"dead": 67}
    async with signed_in(dashboard, ADMIN_TOKEN) as client:
        admin = await client.get(f"/ui/operations/{operation_id}?tenant=acme")
        assert admin.status_code == 200 and "acme-team" in admin.text
