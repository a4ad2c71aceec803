"""The dashboard's pages: overview, jobs, one job, one run, the DLQ, the audit log, the
notifications.

Each reads through the engine (the same functions the HTTP API calls) for the tenant
the viewer acts for, and renders a template; a problem is shown as its ``detail``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Final

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from tickwork.api import access, parameters, render
from tickwork.api.access import Operation
from tickwork.api.services import services
from tickwork.api.ui import chart, notifications, run_filter, views, web
from tickwork.api.ui.words import schedule_in_words
from tickwork.core import hashing, preconditions
from tickwork.core.errors import Forbidden, InvalidRequest, NotFound, TickworkError
from tickwork.core.preview import fire_times
from tickwork.core.records import PENDING, Attempt, Run, Scope, State
from tickwork.core.spec import NOTIFY_JOB
from tickwork.engine import audit, job_table, overview
from tickwork.engine.cursors import Position
from tickwork.engine.jobs import DeadCursor, JobView

router = APIRouter(prefix="/ui", include_in_schema=False)

PAGE_SIZE: Final = 50
RECENT_RUNS: Final = 25
FIRE_TIMES: Final = 10
SHOWS: Final = (
    ("all", "All jobs"),
    ("active", "Not paused"),
    ("paused", "Paused"),
    ("running", "Running now"),
    ("dead", "With dead runs"),
)
_OUTCOME_TONES: Final = {
    "succeeded": "good",
    "failed": "bad",
    "lease-expired": "warn",
    "cancelled": "quiet",
    "snoozed": "quiet",
}

Page = Callable[[web.Viewer], Awaitable[Response]]


async def serve(request: Request, page: Page) -> Response:
    """Run a page for the signed-in viewer: sign-in redirects, problems as pages."""
    try:
        who = await web.viewer(request)
    except web.SignInNeeded:
        return web.sign_in_redirect(request)
    except TickworkError as error:
        return await web.problem_page(request, error, None)
    try:
        return await page(who)
    except TickworkError as error:
        return await web.problem_page(request, error, who)


def _parse_local(text: str | None, field: str) -> datetime | None:
    """A ``datetime-local`` input's value, read as UTC."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError as error:
        raise InvalidRequest(f"{field}: {text!r} is not a date and time", field=field) from error
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _job_filter(text: str | None) -> str | None:
    """A ``job`` filter's value (None: no filter); a name no job can have is refused."""
    return parameters.job_filter((text or "").strip() or None)


def _local_value(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def outcome_tone(outcome: str | None) -> str:
    return _OUTCOME_TONES.get(outcome or "", "quiet")


@router.get("/")
async def overview_page(request: Request) -> Response:
    svc = services(request)

    async def page(who: web.Viewer) -> Response:
        await web.allow(who, Operation.list_runs)
        view = await overview.read(svc.engine.database, who.tenant, svc.engine.clock)
        totals = {
            "started": sum(m.started for m in view.minutes),
            "failed": sum(m.failed for m in view.minutes),
        }
        try:
            await web.allow(who, Operation.list_queues)
        except Forbidden:
            queues = None  # a viewer who may not see them sees the rest
        else:
            queues = await svc.queues.list(who.tenant)
        context = {
            "title": "Overview",
            "section": "overview",
            "view": view,
            "queues": queues,
            "chart": chart.build(view.minutes),
            "totals": totals,
            "window": overview.WINDOW_MINUTES,
        }
        return await web.render(request, "overview.html", context, who)

    return await serve(request, page)


def _job_row(view: JobView) -> dict[str, Any]:
    """The API's Job document, with what the table shows besides."""
    document = render.job(view)
    schedule = view.definition.spec.schedule
    document.update(
        words=schedule_in_words(schedule.cron) if schedule is not None else "",
        zone=schedule.time_zone if schedule is not None else "UTC",
        next_run_at=document["nextRunAt"],
        run_at=view.definition.spec.run_at,
        last_finished_at=None
        if view.summary.last_run is None
        else view.summary.last_run.finished_at,
    )
    return document


@router.get("/jobs")
async def jobs_page(request: Request) -> Response:
    svc = services(request)
    query = request.query_params

    async def page(who: web.Viewer) -> Response:
        await web.allow(who, Operation.list_jobs)
        sort_text = query.get("sort") or "name"
        descending = sort_text.startswith("-")
        try:
            column = job_table.Column(sort_text.lstrip("-"))
        except ValueError:
            column, descending = job_table.Column.name, False
        try:
            show = job_table.Show(query.get("show") or "all")
        except ValueError:
            show = job_table.Show.all
        try:
            number = max(1, min(int(query.get("page") or 1), 1000))
        except ValueError:
            number = 1
        contains = (query.get("q") or "").strip()[:253] or None
        queue = (query.get("queue") or "").strip()[:63] or None
        request_query = job_table.Query(
            contains=contains,
            queue=queue,
            show=show,
            sort=column,
            descending=descending,
            offset=(number - 1) * PAGE_SIZE,
            limit=PAGE_SIZE,
        )
        found = await job_table.page(svc.engine.database, who.tenant, request_query)
        now = await svc.now()
        params = {
            "q": contains,
            "queue": queue,
            "show": show.value if show is not job_table.Show.all else None,
            "sort": request_query.sort_key if request_query.sort_key != "name" else None,
        }
        url = web.url_maker(who)
        first = (number - 1) * PAGE_SIZE + 1
        context = {
            "title": "Jobs",
            "section": "jobs",
            "page": found,
            "rows": [_job_row(view) for view in found.jobs],
            "now": now,
            "params": params | {"show": show.value},
            "shows": SHOWS,
            "filtered": bool(contains or queue or show is not job_table.Show.all),
            "first": first,
            "last": first + len(found.jobs) - 1,
            "prev_url": url("/ui/jobs", **params, page=number - 1) if number > 1 else None,
            "next_url": url("/ui/jobs", **params, page=number + 1)
            if first - 1 + len(found.jobs) < found.total
            else None,
        }
        return await web.render(request, "jobs.html", context, who)

    return await serve(request, page)


@router.get("/jobs/{name}")
async def job_page(name: str, request: Request) -> Response:
    svc = services(request)

    async def page(who: web.Viewer) -> Response:
        await web.allow(who, Operation.get_job, parameters.job_name(name))
        await web.allow(who, Operation.list_runs)
        view = await svc.jobs.get(who.tenant, name)
        document = render.job(view)
        runs, _ = await svc.jobs.runs_of_job(who.tenant, name, None, None, RECENT_RUNS)
        now = await svc.now()
        schedule = view.definition.spec.schedule
        fires: list[Any] = []
        preview_problem = None
        start = None
        if schedule is not None:
            try:
                start = _parse_local(request.query_params.get("from"), "from")
            except InvalidRequest as error:
                preview_problem = error.detail
            fires = fire_times(schedule.compile(), start or now, FIRE_TIMES)
        zone = schedule.time_zone if schedule is not None else "UTC"
        context = {
            "title": name,
            "section": "jobs",
            "job": document,
            "schedule": document["spec"].get("schedule"),
            "words": schedule_in_words(schedule.cron) if schedule is not None else "",
            "jitter": hashing.jitter_offset(who.tenant, name, schedule.jitter_seconds)
            if schedule is not None
            else 0,
            # The DST policy in force: the job's choices, the hour field's rule for the rest.
            "dst": schedule.compile().dst if schedule is not None else None,
            "run_at": view.definition.spec.run_at,
            # Asked only of a job with flow control: the others pay nothing.
            "held_back": await svc.jobs.held_back(who.tenant, name)
            if view.definition.spec.concurrency or view.definition.spec.rate_limit
            else {},
            "zone": zone,
            "fires": fires,
            "from_value": _local_value(start),
            "preview_problem": preview_problem,
            "runs": runs,
            "now": now,
            "lag": views.start_lag,
            "run_duration": lambda run: views.run_duration(run, now),
            "spec_json": orjson.dumps(document["spec"], option=orjson.OPT_INDENT_2).decode(),
            # Sent back by the page's forms: they act on the job as it was shown.
            "etag": preconditions.etag(view.definition.generation),
        }
        return await web.render(request, "job.html", context, who)

    return await serve(request, page)


async def owned_run(
    request: Request, who: web.Viewer, run_id: str, operation: Operation = Operation.get_run
) -> tuple[Run, list[Attempt], Scope]:
    """The run with its attempts if the viewer may do ``operation`` on it, and the scope
    to act on it in: the API's own check (``access.run``), so a run the viewer may not
    touch is absent, as one that does not exist."""
    return await access.run(who.principal, operation, services(request).jobs, run_id)


@router.get("/runs/{run_id}")
async def run_page(run_id: str, request: Request) -> Response:
    svc = services(request)

    async def page(who: web.Viewer) -> Response:
        run, attempts, _ = await owned_run(request, who, run_id)
        try:
            job = await svc.jobs.get(run.tenant, run.job)
            schedule = job.definition.spec.schedule
            zone = schedule.time_zone if schedule is not None else "UTC"
        except NotFound:
            zone = "UTC"  # the job was deleted; its runs stay
        payload = None if run.payload_json is None else views.json_view(run.payload)
        context = {
            "title": f"Run {run.run_id}",
            "section": "jobs",
            "run": run,
            "attempts": attempts,
            "zone": zone,
            "priority": render.run(run)["priority"],
            "lag": views.start_lag(run),
            "payload": payload,
            "cancellable": run.state in PENDING or run.state is State.leased,
            "outcome_tone": outcome_tone,
        }
        return await web.render(request, "run.html", context, who)

    return await serve(request, page)


@router.get("/runs/{run_id}/payload")
async def run_payload(run_id: str, request: Request) -> Response:
    async def page(who: web.Viewer) -> Response:
        run, _, _ = await owned_run(request, who, run_id)
        body = (run.payload_json or "null").encode()
        response = Response(body, media_type="application/json")
        response.headers["Content-Disposition"] = (
            f'attachment; filename="payload-{run.run_id}.json"'
        )
        return web.secure(response)

    return await serve(request, page)


@router.get("/dlq")
async def dlq_page(request: Request) -> Response:
    svc = services(request)
    query = request.query_params

    async def page(who: web.Viewer) -> Response:
        await web.allow(who, Operation.list_dead)
        job = _job_filter(query.get("job"))
        since = _parse_local(query.get("since"), "since")
        until = _parse_local(query.get("until"), "until")
        cursor_text = query.get("cursor")
        if cursor_text:
            cursor: DeadCursor | None = DeadCursor.decode(cursor_text)
        elif until is not None:
            cursor = Position(until, 0, 0)  # every run that died strictly before `until`
        else:
            cursor = None
        dead, next_cursor = await svc.jobs.dead_letters(who.tenant, job, cursor, PAGE_SIZE)
        if since is not None and any(r.finished_at and r.finished_at < since for r in dead):
            dead = [r for r in dead if r.finished_at is not None and r.finished_at >= since]
            next_cursor = None
        now = await svc.now()
        params = {"job": job, "since": _local_value(since), "until": _local_value(until)}
        url = web.url_maker(who)
        context = {
            "title": "DLQ",
            "section": "dlq",
            "runs": dead,
            "now": now,
            "params": params,
            "filtered": bool(job or since or until),
            "job_names": await overview.dead_jobs(svc.engine.database, who.tenant),
            # Every dead run the filter matches, not only this page: "Replay all N".
            "matching": await run_filter.dead_matching(request, who, job, since, until),
            "next_url": None
            if next_cursor is None
            else url("/ui/dlq", **params, cursor=next_cursor.encode()),
        }
        return await web.render(request, "dlq.html", context, who)

    return await serve(request, page)


@router.get("/audit")
async def audit_page(request: Request) -> Response:
    svc = services(request)
    query = request.query_params

    async def page(who: web.Viewer) -> Response:
        await web.allow(who, Operation.list_audit)
        job = _job_filter(query.get("job"))
        cursor_text = query.get("cursor")
        cursor = Position.decode(cursor_text) if cursor_text else None
        entries, next_cursor = await audit.entries(
            svc.engine.database, who.tenant, job, cursor, PAGE_SIZE
        )
        url = web.url_maker(who)
        context = {
            "title": "Audit",
            "section": "audit",
            "entries": entries,
            "details": [_detail(entry.detail) for entry in entries],
            "now": await svc.now(),
            "params": {"job": job},
            "filtered": job is not None,
            "next_url": None
            if next_cursor is None
            else url("/ui/audit", job=job, cursor=next_cursor.encode()),
        }
        return await web.render(request, "audit.html", context, who)

    return await serve(request, page)


async def _may(who: web.Viewer, operation: Operation) -> bool:
    try:
        await web.allow(who, operation)
    except Forbidden:
        return False
    return True


@router.get("/notifications")
async def notifications_page(request: Request) -> Response:
    svc = services(request)

    async def page(who: web.Viewer) -> Response:
        # Deliveries are audit entries: what the page needs. A viewer who may not see
        # the targets or the runs sees the rest, as the overview does with queues.
        await web.allow(who, Operation.list_audit)
        targets = None
        if await _may(who, Operation.list_targets):
            targets = await svc.targets.list(who.tenant)
        pending = None
        if await _may(who, Operation.list_runs):
            pending = await notifications.pending(svc.operations, who.tenant)
        delivered = await notifications.deliveries(svc.engine, who.tenant)
        context = {
            "title": "Notifications",
            "section": "notifications",
            "targets": targets,
            "signing": notifications.signing,
            "pending": pending,
            "deliveries": delivered,
            "event_tone": notifications.event_tone,
            "notify_job": NOTIFY_JOB,
            "now": await svc.now(),
        }
        return await web.render(request, "notifications.html", context, who)

    return await serve(request, page)


def _detail(detail: Any) -> str:
    """An entry's detail as compact JSON for the table (the template cuts it)."""
    if detail in (None, {}, []):
        return ""
    return orjson.dumps(detail, option=orjson.OPT_SORT_KEYS).decode()
