"""The dashboard over plain HTTP: sessions, CSRF, tenancy, escaping, headers."""

from __future__ import annotations

import re

import httpx
import pytest
from conftest import ADMIN_TOKEN, OTHER_TEAM_TOKEN, TEAM_TOKEN, WORKER_TOKEN

from tickwork.api.ui import sessions
from tickwork.core.records import Manager
from tickwork.core.spec import JobSpec
from tickwork.engine import audit
from tickwork.engine.queues import Queues

from .conftest import UiServer, csrf_of, dead_run, enqueue, make_job, signed_in


async def test_a_page_asks_to_sign_in_and_comes_back_after(dashboard: UiServer) -> None:
    async with httpx.AsyncClient(base_url=dashboard.url) as client:
        first = await client.get("/ui/jobs?q=night")
        assert first.status_code == 303
        assert first.headers["location"] == "/ui/login?next=%2Fui%2Fjobs%3Fq%3Dnight"
        form = await client.get(first.headers["location"])
        assert 'name="token" type="password"' in form.text
        answer = await client.post(
            "/ui/login",
            data={"token": TEAM_TOKEN, "csrf": csrf_of(form.text), "next": "/ui/jobs?q=night"},
        )
        assert answer.status_code == 303
        assert answer.headers["location"] == "/ui/jobs?q=night"
        cookie = next(
            c for c in answer.headers.get_list("set-cookie") if c.startswith("tickwork_session=")
        )
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
        assert {"httponly", "path", "max-age"} <= attributes
        assert "samesite=strict" in cookie.lower() and "path=/ui" in cookie.lower()
        assert "secure" not in attributes  # plain HTTP on 127.0.0.1
        assert TEAM_TOKEN not in cookie  # sealed, not readable
        page = await client.get("/ui/jobs?q=night")
        assert page.status_code == 200 and "acme-team" in page.text


async def test_sign_in_refuses_unknown_and_worker_tokens_and_foreign_next(
    dashboard: UiServer,
) -> None:
    async with httpx.AsyncClient(base_url=dashboard.url) as client:
        form = await client.get("/ui/login")
        unknown = await client.post(
            "/ui/login", data={"token": "nope-" * 5, "csrf": csrf_of(form.text)}
        )
        assert unknown.status_code == 401 and "unknown token" in unknown.text
        assert "tickwork_session" not in unknown.headers.get("set-cookie", "")
        form = await client.get("/ui/login")
        worker = await client.post(
            "/ui/login", data={"token": WORKER_TOKEN, "csrf": csrf_of(form.text)}
        )
        assert worker.status_code == 403 and "worker token cannot" in worker.text
        form = await client.get("/ui/login")
        away = await client.post(
            "/ui/login",
            data={"token": TEAM_TOKEN, "csrf": csrf_of(form.text), "next": "https://evil.test/ui/"},
        )
        assert away.headers["location"] == "/ui/"


async def test_the_sign_in_form_needs_its_own_csrf_token(dashboard: UiServer) -> None:
    async with httpx.AsyncClient(base_url=dashboard.url) as client:
        await client.get("/ui/login")
        forged = await client.post("/ui/login", data={"token": TEAM_TOKEN, "csrf": "0" * 64})
        assert forged.status_code == 403
        assert "tickwork_session" not in forged.headers.get("set-cookie", "")


async def test_the_cookie_is_secure_behind_tls(dashboard: UiServer) -> None:
    # uvicorn trusts X-Forwarded-Proto from 127.0.0.1, as from a TLS-terminating proxy.
    tls = {"X-Forwarded-Proto": "https"}
    async with httpx.AsyncClient(base_url=dashboard.url, headers=tls) as client:
        form = await client.get("/ui/login")
        login_cookie = form.headers["set-cookie"]
        assert "; secure" in login_cookie.lower()
        # The client talks plain HTTP to the "proxy" side: it sends the Secure cookie by hand.
        nonce = login_cookie.split(";")[0]
        answer = await client.post(
            "/ui/login",
            data={"token": TEAM_TOKEN, "csrf": csrf_of(form.text)},
            headers={"Origin": dashboard.url.replace("http://", "https://"), "Cookie": nonce},
        )
        assert answer.status_code == 303, answer.text
        cookie = next(
            c for c in answer.headers.get_list("set-cookie") if c.startswith("tickwork_session=")
        )
        assert "; secure" in cookie.lower() and "samesite=strict" in cookie.lower()


async def test_every_action_needs_the_csrf_token(dashboard: UiServer) -> None:
    await make_job(dashboard, "acme", "nightly")
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = await client.get("/ui/jobs")
        token = csrf_of(page.text)
        for data, headers in [
            ({}, {}),
            ({"csrf": "f" * 64}, {}),
            ({"csrf": token}, {"Origin": "https://evil.test"}),
            ({"csrf": token}, {"Sec-Fetch-Site": "cross-site"}),
        ]:
            refused = await client.post("/ui/jobs/nightly/pause", data=data, headers=headers)
            assert refused.status_code == 403, (data, headers)
            assert "Form refused" in refused.text
        assert not (await dashboard.jobs.get("acme", "nightly")).definition.paused
        done = await client.post("/ui/jobs/nightly/pause", data={"csrf": token, "next": "/ui/jobs"})
        assert done.status_code == 303 and done.headers["location"] == "/ui/jobs"
        assert (await dashboard.jobs.get("acme", "nightly")).definition.paused
        shown = await client.get("/ui/jobs")
        assert "Paused nightly." in shown.text


async def test_sign_out_ends_the_session(dashboard: UiServer) -> None:
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        sealed = client.cookies.get(sessions.SESSION_COOKIE, path="/ui")
        page = await client.get("/ui/")
        answer = await client.post("/ui/logout", data={"csrf": csrf_of(page.text)})
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/login"
        assert (await client.get("/ui/")).status_code == 303
    async with httpx.AsyncClient(base_url=dashboard.url) as replay:
        replay.cookies.set(sessions.SESSION_COOKIE, sealed or "", path="/ui")
        assert (await replay.get("/ui/")).status_code == 303


async def test_a_session_expires(dashboard: UiServer) -> None:
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        assert (await client.get("/ui/")).status_code == 200
        assert dashboard.app is not None
        sealer = dashboard.app.state.dashboard.sealer
        later = sealer.now() + dashboard.services.settings.ui_session_seconds + 1
        sealer._clock = lambda: later
        answer = await client.get("/ui/")
        assert answer.status_code == 303 and answer.headers["location"].startswith("/ui/login")


async def test_a_team_sees_only_its_own_tenant(dashboard: UiServer) -> None:
    await make_job(dashboard, "acme", "acme-export")
    await make_job(dashboard, "globex", "globex-secret", queue="default")
    secret = await dead_run(dashboard, "globex", "globex-secret", "globex internals")
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        jobs = await client.get("/ui/jobs")
        assert "acme-export" in jobs.text and "globex-secret" not in jobs.text
        for path in ["/ui/dlq", "/ui/", "/ui/jobs?q=globex"]:
            page = (await client.get(path)).text
            assert "globex-secret" not in page and "globex internals" not in page
        other = await client.get("/ui/jobs?tenant=globex")
        assert other.status_code == 403 and "acts for tenant" in other.text
        assert (await client.get("/ui/jobs/globex-secret")).status_code == 404
        run = await client.get(f"/ui/runs/{secret.run_id}")
        assert run.status_code == 404 and "globex internals" not in run.text
        page = await client.get("/ui/dlq")
        replay = await client.post(
            "/ui/dlq/replay", data={"csrf": csrf_of(page.text), "run": secret.run_id}
        )
        assert replay.status_code == 303
        still, _ = await dashboard.jobs.run(secret.run_id)
        assert still.state.value == "dead"


async def test_an_admin_picks_the_tenant_and_links_keep_it(dashboard: UiServer) -> None:
    await make_job(dashboard, "globex", "globex-report")
    async with signed_in(dashboard, ADMIN_TOKEN) as client:
        own = await client.get("/ui/jobs")
        assert "globex-report" not in own.text
        assert '<option value="globex">' in own.text  # the tenant picker knows it
        theirs = await client.get("/ui/jobs?tenant=globex")
        assert "globex-report" in theirs.text
        assert 'href="/ui/jobs/globex-report?tenant=globex"' in theirs.text
        assert '<input type="hidden" name="tenant" value="globex">' in theirs.text


async def test_payloads_and_errors_are_escaped(dashboard: UiServer) -> None:
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    await make_job(dashboard, "acme", "hostile")
    run = await dead_run(dashboard, "acme", "hostile", hostile)
    await enqueue(dashboard, "acme", "hostile", payload={"html": hostile, "quote": '"><b>'})
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        for path in [f"/ui/runs/{run.run_id}", "/ui/dlq", "/ui/jobs/hostile"]:
            page = await client.get(path)
            assert page.status_code == 200
            assert "<script>alert" not in page.text and "<img src=x" not in page.text
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
        runs, _ = await dashboard.jobs.runs_of_job("acme", "hostile", None, None, 1)
        payload = await client.get(f"/ui/runs/{runs[0].run_id}")
        assert "&#34;&gt;&lt;b&gt;" in payload.text or "&quot;&gt;&lt;b&gt;" in payload.text


async def test_pages_forbid_inline_script_and_framing(dashboard: UiServer) -> None:
    await make_job(dashboard, "acme", "nightly", schedule={"cron": "30 2 * * *"})
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        stranger = httpx.AsyncClient(base_url=dashboard.url)
        for path in ["/ui/", "/ui/jobs", "/ui/jobs/nightly", "/ui/dlq", "/ui/login"]:
            page = await (stranger if path == "/ui/login" else client).get(path)
            assert page.status_code == 200, path
            policy = page.headers["content-security-policy"]
            assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
            assert "unsafe-inline" not in policy
            assert page.headers["x-frame-options"] == "DENY"
            assert page.headers["cache-control"] == "no-store"
            assert not re.search(r"<script(?![^>]*\ssrc=)", page.text), path
            assert not re.search(r"\sstyle=|\son[a-z]+=", page.text), path
            assert TEAM_TOKEN not in page.text
        await stranger.aclose()
        script = await client.get(re.search(r'src="(/ui/static/app\.js[^"]*)"', page.text)[1])
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")


@pytest.mark.parametrize("path", ["/ui/jobs", "/ui/audit"])
async def test_the_live_region_is_served_alone(dashboard: UiServer, path: str) -> None:
    """What a page refreshes in place comes without the page around it, and not to a
    stranger."""
    await make_job(dashboard, "acme", "nightly")
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        live = await client.get(path, headers={"X-Tickwork-Live": "1"})
        assert live.status_code == 200
        assert "nightly" in live.text and "<html" not in live.text
    async with httpx.AsyncClient(base_url=dashboard.url) as stranger:
        gone = await stranger.get(path, headers={"X-Tickwork-Live": "1"})
        assert gone.status_code == 401


async def test_dlq_replay_and_discard_are_confirmed_and_audited(dashboard: UiServer) -> None:
    await make_job(dashboard, "acme", "poison")
    first = await dead_run(dashboard, "acme", "poison")
    second = await dead_run(dashboard, "acme", "poison")
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = await client.get("/ui/dlq?job=poison")
        token = csrf_of(page.text)
        confirm = await client.post(
            "/ui/dlq/confirm",
            data={"csrf": token, "action": "replay", "run": [first.run_id, second.run_id]},
        )
        assert confirm.status_code == 200 and "Replay 2 runs" in confirm.text
        assert (await dashboard.jobs.run(first.run_id))[0].state.value == "dead"  # not yet
        done = await client.post(
            "/ui/dlq/replay",
            data={"csrf": token, "run": [first.run_id, second.run_id], "next": "/ui/dlq"},
        )
        assert done.status_code == 303
        assert "Replayed 2 runs." in (await client.get("/ui/dlq")).text
    for run in (first, second):
        assert (await dashboard.jobs.run(run.run_id))[0].state.value == "ready"
    entries, _ = await audit.entries(dashboard.database, "acme", "poison", None, 10)
    assert [(e.action, e.actor) for e in entries[:2]] == [("replay", "acme-team")] * 2


async def test_problems_are_shown_as_their_detail(dashboard: UiServer) -> None:
    await make_job(dashboard, "acme", "nightly")
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        missing = await client.get("/ui/jobs/no-such-job")
        assert missing.status_code == 404
        assert "no job &#39;no-such-job&#39; in tenant &#39;acme&#39;" in missing.text
        page = await client.get("/ui/jobs")
        run = await enqueue(dashboard, "acme", "nightly")
        await dashboard.jobs.cancel(run.run_id, "test")
        answer = await client.post(
            f"/ui/runs/{run.run_id}/replay-nothing", data={"csrf": csrf_of(page.text)}
        )
        assert answer.status_code in (404, 405)
        refused = await client.post(
            "/ui/dlq/replay",
            data={"csrf": csrf_of(page.text), "run": run.run_id, "next": "/ui/dlq"},
        )
        assert refused.status_code == 303
        shown = await client.get("/ui/dlq")
        assert "only dead runs can be" in shown.text


async def test_other_tokens_are_refused_for_team_pages(dashboard: UiServer) -> None:
    async with signed_in(dashboard, OTHER_TEAM_TOKEN) as client:
        assert (await client.get("/ui/")).status_code == 200
        assert (await client.get("/ui/nowhere")).status_code == 404


async def test_run_now_and_cancel_are_audited_with_the_signed_in_actor(
    dashboard: UiServer,
) -> None:
    await make_job(dashboard, "acme", "export")
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = await client.get("/ui/jobs/export")
        token = csrf_of(page.text)
        enqueued = await client.post(
            "/ui/jobs/export/enqueue", data={"csrf": token, "next": "/ui/jobs/export"}
        )
        assert enqueued.status_code == 303
        runs, _ = await dashboard.jobs.runs_of_job("acme", "export", None, None, 5)
        assert [run.state.value for run in runs] == ["ready"]
        assert (
            f"Enqueued run {runs[0].run_id} of export: ready."
            in (await client.get("/ui/jobs/export")).text
        )
        cancelled = await client.post(
            f"/ui/runs/{runs[0].run_id}/cancel", data={"csrf": token, "next": "/ui/jobs/export"}
        )
        assert cancelled.status_code == 303
    run, _ = await dashboard.jobs.run(runs[0].run_id)
    assert run.state.value == "cancelled"
    entries, _ = await audit.entries(dashboard.database, "acme", "export", None, 10)
    assert [(e.action, e.actor) for e in entries[:2]] == [
        ("cancel", "acme-team"),
        ("enqueue", "acme-team"),
    ]


async def test_a_large_payload_is_shown_cut_and_downloads_whole(dashboard: UiServer) -> None:
    await make_job(dashboard, "acme", "bulky")
    payload = {"rows": ["x" * 100 for _ in range(1000)]}
    run = await enqueue(dashboard, "acme", "bulky", payload=payload)
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = await client.get(f"/ui/runs/{run.run_id}")
        assert "showing the first 16.0 KiB" in page.text
        assert len(page.text) < 60_000
        whole = await client.get(f"/ui/runs/{run.run_id}/payload")
        assert whole.headers["content-disposition"].startswith("attachment")
        assert whole.json() == payload


async def test_declared_jobs_say_where_they_are_kept_and_refuse_a_pause(
    dashboard: UiServer,
) -> None:
    spec = JobSpec.model_validate({"queue": "default", "retry": {"maxAttempts": 1}})
    await dashboard.jobs.put("acme", "from-cluster", spec, "operator", manager=Manager.kubernetes)
    await dashboard.jobs.put("acme", "from-file", spec, "dev", manager=Manager.manifests)
    await make_job(dashboard, "acme", "from-api")
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        table = (await client.get("/ui/jobs")).text
        managed = dict(
            re.findall(
                r'href="/ui/jobs/([\w-]+)".*?data-label="Managed by">(.*?)</td>', table, re.S
            )
        )
        assert "Kubernetes" in managed["from-cluster"]
        assert "manifest" in managed["from-file"] and "Kubernetes" not in managed["from-file"]
        assert "API" in managed["from-api"]
        page = await client.get("/ui/jobs/from-cluster")
        assert "managed by Kubernetes" in page.text
        answer = await client.post(
            "/ui/jobs/from-cluster/pause",
            data={"csrf": csrf_of(page.text), "next": "/ui/jobs/from-cluster"},
        )
        assert answer.status_code == 303
        shown = await client.get(answer.headers["location"])
        assert "is defined by a ScheduledJob" in shown.text
    job = await dashboard.jobs.get("acme", "from-cluster")
    assert not job.definition.spec.paused


async def test_a_refresh_in_flight_at_sign_out_leaves_the_notice_to_the_page(
    dashboard: UiServer,
) -> None:
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = await client.get("/ui/jobs")
        await client.post("/ui/logout", data={"csrf": csrf_of(page.text)})
        # The jobs page's refresh, sent as the sign-out lands: the browser follows its
        # redirect to the sign-in page, with the refresh's header.
        refresh = await client.get("/ui/login", headers={"x-tickwork-live": "1"})
        assert refresh.status_code == 200
        shown = await client.get("/ui/login")
        assert "Signed out." in shown.text


async def test_the_shards_table_shows_each_owner_and_its_last_pass(dashboard: UiServer) -> None:
    async with signed_in(dashboard, ADMIN_TOKEN) as client:
        before = (await client.get("/ui/")).text
        shards = dashboard.scheduler.database.shard_count
        assert before.count('data-label="Last pass"><span class="quiet">none yet') == shards
        assert "No scheduler has taken a shard yet" in before
        reports = await dashboard.scheduler.pass_once()
        assert len(reports) == shards
        after = (await client.get("/ui/")).text
    shown = r'data-label="Scheduler"><code>(.*?)</code>.*?data-label="Last pass">(.*?)</td>'
    passes = re.findall(shown, after, re.S)
    assert len(passes) == shards
    for owner, last_pass in passes:
        assert owner == dashboard.scheduler.identity
        assert "none yet" not in last_pass
        assert "ago" in last_pass or "(now)" in last_pass
    assert "No scheduler has taken a shard yet" not in after


async def test_the_audit_page_lists_who_changed_what_for_the_tenant_only(
    dashboard: UiServer,
) -> None:
    await make_job(dashboard, "acme", "nightly")
    await make_job(dashboard, "acme", "hourly")
    await make_job(dashboard, "globex", "secret-job")
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = await client.get("/ui/jobs/nightly")
        answer = await client.post(
            "/ui/jobs/nightly/pause", data={"csrf": csrf_of(page.text), "next": "/ui/jobs/nightly"}
        )
        assert answer.status_code == 303
        assert 'href="/ui/audit?job=nightly"' in (await client.get("/ui/jobs/nightly")).text
        log = (await client.get("/ui/audit")).text
        rows = re.findall(
            r'data-label="Job"><a [^>]*>([\w-]+)</a>.*?data-label="Action">'
            r'<span class="badge quiet">([\w-]+)</span>.*?data-label="Actor"><code>(.*?)</code>',
            log,
            re.S,
        )
        # Newest first: the pause by the signed-in team, then the two creations.
        assert rows[0] == ("nightly", "pause", "acme-team")
        assert {row[0] for row in rows} == {"nightly", "hourly"}
        assert "secret-job" not in log
        only = (await client.get("/ui/audit", params={"job": "hourly"})).text
        assert "nightly" not in only.split("<table", 1)[-1] and "hourly" in only
        empty = (await client.get("/ui/audit", params={"job": "never-made"})).text
        assert "Nothing was recorded for job never-made" in empty
        bad = await client.get("/ui/audit", params={"job": "Not A Name!"})
        assert bad.status_code == 400 and "job" in bad.text


async def test_a_pause_or_resume_from_a_stale_page_is_not_done(dashboard: UiServer) -> None:
    """Someone resumed and paused the job again (for a reason this page never showed):
    the Resume button of the page shown before does nothing, and says so."""
    await make_job(dashboard, "acme", "nightly")
    await dashboard.jobs.set_paused("acme", "nightly", True, "alice")
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = (await client.get("/ui/jobs/nightly")).text
        [shown] = re.findall(r'name="etag" value="([^"]+)"', page)
        assert shown == "&#34;g2&#34;"
        await dashboard.jobs.set_paused("acme", "nightly", False, "bob")
        await dashboard.jobs.set_paused("acme", "nightly", True, "bob")
        form = {"csrf": csrf_of(page), "next": "/ui/jobs/nightly", "etag": '"g2"'}
        stale = await client.post("/ui/jobs/nightly/resume", data=form)
        assert stale.status_code == 303
        after = (await client.get(stale.headers["location"])).text
        assert "nightly changed since this page was shown: nothing done" in after
        assert (await dashboard.jobs.get("acme", "nightly")).definition.paused
        fresh = (await client.get("/ui/jobs/nightly")).text
        [tag] = re.findall(r'name="etag" value="&#34;([^&]+)&#34;"', fresh)
        form = {"csrf": csrf_of(fresh), "next": "/ui/jobs/nightly", "etag": f'"{tag}"'}
        assert (await client.post("/ui/jobs/nightly/resume", data=form)).status_code == 303
        assert not (await dashboard.jobs.get("acme", "nightly")).definition.paused


async def test_the_overview_lists_the_queues_and_pauses_and_resumes_one(
    dashboard: UiServer,
) -> None:
    await dashboard.jobs.put("acme", "invoice", JobSpec.model_validate({"queue": "billing"}), "t")
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = (await client.get("/ui/")).text
        assert "<code>billing</code>" in page and "serving" in page
        form = {"csrf": csrf_of(page), "next": "/ui/"}
        paused = await client.post("/ui/queues/billing/pause", data=form)
        assert paused.status_code == 303
        after = (await client.get(paused.headers["location"])).text
        assert "Paused queue billing: its runs wait until it is resumed." in after
        assert '<span class="badge warn">paused</span> <span class="quiet">by acme-team' in after
        queues = Queues(dashboard.database, dashboard.services.engine.clock)
        assert [q.paused for q in await queues.list("acme")] == [True]
        bad = await client.post("/ui/queues/Not_A_Queue/pause", data=form)
        assert "queue must be" in (await client.get(bad.headers["location"])).text
        resumed = await client.post("/ui/queues/billing/resume", data=form)
        assert "Resumed queue billing." in (await client.get(resumed.headers["location"])).text
        assert [q.paused for q in await queues.list("acme")] == [False]
