"""Jobs, runs and the DLQ: the routes people and their tools use (pydantic-validated).

Bodies are read through ``bodies``: bounded JSON, camelCase fields only, no type
coercion, unknown fields refused; each body model is documented with ``openapi_extra``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request
from starlette.responses import Response

from tickwork.api import access, bodies, models, parameters, render, responses
from tickwork.api.access import Operation
from tickwork.api.auth import Principal
from tickwork.api.parameters import Caller, Cursor, Limit, Svc, TenantParam
from tickwork.api.services import Services
from tickwork.core import fields, limits, preconditions
from tickwork.core.errors import InvalidRequest, NotFound, TickworkError
from tickwork.core.records import Run, Scope, State
from tickwork.core.spec import JobSpec, check_name, encoded_payloads
from tickwork.engine.backfill import Backfills
from tickwork.engine.jobs import DeadCursor, EnqueueRequest, Jobs

router = APIRouter(prefix="/v1")

JobName = Annotated[
    str,
    Path(description="The job's name (DNS-1123 subdomain).", json_schema_extra=models.NAME_SCHEMA),
]
RunId = Annotated[str, Path(alias="runId", description="The run's id.")]
RunChange = Callable[[Jobs, str, str, Scope], Awaitable[Run]]
RunRoute = Callable[[str, Principal, Services], Awaitable[Response]]
JobRoute = Callable[[str, Principal, Services, Request, str | None], Awaitable[Response]]

_errors = {
    **parameters.ERRORS,
    **parameters.problems({400: "invalid-request / invalid-schedule"}),
}
# Cancelling a run, replaying or discarding a dead one.
_run_change_answers = {
    200: {"model": models.Run},
    **parameters.problems({409: "invalid-state"}),
    **_errors,
}
# PUT, DELETE, :pause and :resume, with If-Match (or If-None-Match: * on PUT), of a job
# a ScheduledJob may declare.
_edit_errors = {
    **_errors,
    **parameters.problems(
        {
            409: "managed-by-kubernetes: the job is defined by a ScheduledJob; "
            "edit that object instead",
            412: "precondition-failed: the job changed since its ETag was read (If-Match), "
            "or exists already (If-None-Match: *)",
        }
    ),
}


def _limit(svc: Services, limit: int | None) -> int:
    return limit or svc.settings.default_page_size


def _plain_payloads(document: Any) -> list[bytes | None] | None:
    """The payloads of a plain batch, ``{"runs": [...]}`` whose every item is ``{}`` or
    ``{"payload": …}`` with a valid payload, as JSON texts (None for ``{}``: the job's
    payload), checked by hand for the whole batch at once (``encoded_payloads``):
    pydantic, and then a walk of each payload on its own, took most of the time of such
    a batch. None for any other body, which goes through the item models, so a bad item
    gets its problem exactly as there. A plain batch's nesting is bounded by the
    payloads' own (``limits.MAX_JSON_DEPTH``), which the check walks: its body is not
    walked for depth again."""
    if type(document) is not dict or len(document) != 1:
        return None
    items = document.get("runs")
    if type(items) is not list or not 1 <= len(items) <= limits.MAX_ENQUEUE_BATCH:
        return None
    given: list[Any] = []
    for item in items:
        if type(item) is not dict:
            return None
        if item:
            if len(item) != 1 or "payload" not in item:
                return None
            given.append(item["payload"])
    encoded = encoded_payloads(given)
    if encoded is None:
        return None
    texts = iter(encoded)
    return [next(texts) if item else None for item in items]


async def _admit(svc: Services, tenant: str, runs: int) -> None:
    """The tenant's quotas: enqueue rate and pending runs (429 quota-exceeded with
    Retry-After)."""
    if svc.quota is not None:
        await svc.quota.admit(tenant, runs)


def _check_cursor(
    cursor: str | None, check: Callable[[str], object], malformed: type[Exception]
) -> None:
    """A page's cursor that ``check`` refuses (with ``malformed``) is the caller's error."""
    if cursor is None:
        return
    try:
        check(cursor)
    except malformed as error:
        raise InvalidRequest(f"malformed cursor: {error}", field="cursor") from error


async def _job_response(svc: Services, tenant: str, name: str, status: int = 200) -> Response:
    """The Job, with its ``ETag``: an edit that sends it back as ``If-Match`` applies only
    to the job as it was read."""
    view = await svc.jobs.get(tenant, name)
    answer = responses.json(render.job(view), status)
    answer.headers["ETag"] = preconditions.etag(view.definition.generation)
    return answer


def _if_match_only(request: Request) -> preconditions.Precondition:
    """A pause, a resume or a delete acts on a job that exists: If-None-Match means nothing."""
    precondition = _precondition(request)
    if precondition.none_match_any:
        raise InvalidRequest("If-None-Match has no meaning here", field="If-None-Match")
    return precondition


def _precondition(request: Request) -> preconditions.Precondition:
    headers = request.headers
    return preconditions.Precondition.of(headers.get("if-match"), headers.get("if-none-match"))


@router.put(
    "/jobs/{name}",
    summary="Create or replace a job",
    responses={200: {"model": models.Job}, 201: {"model": models.Job}, **_edit_errors},
    openapi_extra=bodies.openapi(JobSpec, required=True),
)
async def put_job(
    name: JobName,
    caller: Caller,
    svc: Svc,
    request: Request,
    tenant: TenantParam = None,
) -> Response:
    owner = await access.tenant(caller, Operation.put_job, tenant, name)
    try:
        check_name(name)
    except ValueError as error:
        raise InvalidRequest(str(error), field="name") from error
    precondition = _precondition(request)
    spec = await bodies.model(request, JobSpec, required=True, named=name)
    assert spec is not None
    stored = await svc.jobs.put(owner, name, spec, caller.subject, precondition=precondition)
    return await _job_response(svc, owner, name, 201 if stored.created else 200)


@router.get(
    "/jobs/{name}",
    summary="A job with its status",
    responses={200: {"model": models.Job}, **_errors},
)
async def get_job(name: JobName, caller: Caller, svc: Svc, tenant: TenantParam = None) -> Response:
    owner = await access.tenant(caller, Operation.get_job, tenant, name)
    return await _job_response(svc, owner, parameters.job_name(name))


@router.delete(
    "/jobs/{name}",
    summary="Delete a job: cancel its pending runs, keep history",
    responses={200: {"model": models.DeletedJob}, **_edit_errors},
)
async def delete_job(
    name: JobName, caller: Caller, svc: Svc, request: Request, tenant: TenantParam = None
) -> Response:
    owner = await access.tenant(caller, Operation.delete_job, tenant, name)
    precondition = _if_match_only(request)
    cancelled, requested = await svc.jobs.delete(
        owner, parameters.job_name(name), caller.subject, precondition=precondition
    )
    return responses.json(
        {
            "name": name,
            "tenant": owner,
            "cancelledRuns": cancelled,
            "cancelRequestedRuns": requested,
        }
    )


@router.get(
    "/jobs", summary="The tenant's jobs", responses={200: {"model": models.JobPage}, **_errors}
)
async def list_jobs(
    caller: Caller,
    svc: Svc,
    tenant: TenantParam = None,
    cursor: Cursor = None,
    limit: Limit = None,
) -> Response:
    owner = await access.tenant(caller, Operation.list_jobs, tenant)
    # The last name of the previous page.
    _check_cursor(cursor, functools.partial(check_name, stored=True), ValueError)
    page, next_cursor = await svc.jobs.list_jobs(owner, cursor, _limit(svc, limit))
    items = [render.job(view) for view in page]
    return responses.json({"items": items, "nextCursor": next_cursor})


def _set_paused(paused: bool) -> JobRoute:
    """The route that pauses (or resumes) a job."""

    async def route(
        name: JobName, caller: Caller, svc: Svc, request: Request, tenant: TenantParam = None
    ) -> Response:
        # One permission for both: whoever may pause a job may resume it.
        owner = await access.tenant(caller, Operation.pause_job, tenant, name)
        precondition = _if_match_only(request)
        await svc.jobs.set_paused(
            owner, parameters.job_name(name), paused, caller.subject, precondition=precondition
        )
        return await _job_response(svc, owner, name)

    return route


parameters.pause_and_resume(
    router,
    "/jobs/{name}",
    "job",
    ("Pause a job (idempotent)", "Resume a job (idempotent)"),
    {200: {"model": models.Job}, **_edit_errors},
    _set_paused,
)


@router.post(
    "/jobs/{name}:backfill",
    summary="Make the runs the job's schedule would have made in a past range",
    responses={200: {"model": models.Backfilled}, **_errors},
    openapi_extra=bodies.openapi(models.BackfillRequest, required=True),
)
async def backfill_job(
    name: JobName, caller: Caller, svc: Svc, request: Request, tenant: TenantParam = None
) -> Response:
    owner = await access.tenant(caller, Operation.enqueue, tenant, name)
    body = await bodies.model(request, models.BackfillRequest, required=True)
    assert body is not None
    made = await Backfills(svc.engine.database, svc.engine.clock).backfill(
        owner, parameters.job_name(name), body.from_, body.to, caller.subject, dry_run=body.dry_run
    )
    return responses.json(
        {
            "job": name,
            "dryRun": body.dry_run,
            "fireTimes": list(made.fire_times),
            "created": made.created,
            "existing": made.existing,
            "nextFrom": made.next_from,
        }
    )


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=limits.MAX_IDEMPOTENCY_KEY_LENGTH,
        description="Enqueueing twice with one key and the same body returns the first "
        "run; the same key with another body is refused (422 idempotency-key-reused).",
    ),
]


@router.post(
    "/jobs/{name}/runs",
    summary="Enqueue a run now, at runAt, or after delaySeconds",
    responses={
        200: {
            "model": models.EnqueuedRun,
            "description": "An earlier run with this Idempotency-Key, or the run the job's "
            "unique (deduplicated) or debounce (debounced) rule answered with",
        },
        201: {"model": models.EnqueuedRun, "description": "A new run"},
        409: {"model": models.Problem, "description": "concurrency-limit"},
        413: {"model": models.Problem, "description": "payload-too-large"},
        422: {"model": models.Problem, "description": "idempotency-key-reused"},
        429: {"model": models.Problem, "description": "quota-exceeded (see Retry-After)"},
        **_errors,
    },
    openapi_extra=bodies.openapi(models.EnqueueRequest, required=False),
)
async def enqueue(
    name: JobName,
    caller: Caller,
    svc: Svc,
    request: Request,
    idempotency_key: IdempotencyKey = None,
    tenant: TenantParam = None,
) -> Response:
    owner = await access.tenant(caller, Operation.enqueue, tenant, name)
    parameters.job_name(name)
    body = await bodies.model(request, models.EnqueueRequest, required=False)
    body = body or models.EnqueueRequest()
    await _admit(svc, owner, 1)
    payload_given = "payload" in body.model_fields_set
    run, created = await svc.jobs.enqueue(
        owner,
        parameters.job_name(name),
        EnqueueRequest(
            run_at=body.run_at,
            delay_seconds=body.delay_seconds,
            payload=body.payload,
            payload_given=payload_given,
            priority=body.priority,
            idempotency_key=idempotency_key,
            if_not_running=body.if_not_running,
        ),
        caller.subject,
    )
    if created:
        svc.metrics.enqueued.inc()
    return responses.json(render.run(run), 201 if created else 200)


@router.post(
    "/jobs/{name}/runs:batch",
    summary="Enqueue up to 1 000 runs in one call",
    responses={
        200: {"model": models.BatchEnqueueResponse},
        429: {"model": models.Problem, "description": "quota-exceeded (see Retry-After)"},
        **_errors,
    },
    openapi_extra=bodies.openapi(models.BatchEnqueueRequest, required=True),
)
async def enqueue_batch(
    name: JobName, caller: Caller, svc: Svc, request: Request, tenant: TenantParam = None
) -> Response:
    owner = await access.tenant(caller, Operation.enqueue, tenant, name)
    parameters.job_name(name)
    raw = await request.body()
    document = bodies.parse(raw, lenient=True, depth=False)
    plain = _plain_payloads(document)
    if plain is not None:
        await _admit(svc, owner, len(plain))
        ready = await svc.jobs.enqueue_ready(owner, name, plain, caller.subject)
        if ready is not None:
            svc.metrics.enqueued.inc(len(ready.ids))
            return responses.json_text(render.ready_runs(ready))
        # A job with a unique or debounce rule: each item is answered on its own below.
    bodies.check_depth(raw, document)
    if not isinstance(document, dict):
        raise InvalidRequest('body must be {"runs": [...]}', field="body")
    unknown = sorted(set(document) - {"runs"})
    if unknown:
        field = fields.key("", unknown[0])
        raise InvalidRequest(f"{field}: unknown field", field=field)
    items = document.get("runs")
    if not isinstance(items, list) or not 1 <= len(items) <= limits.MAX_ENQUEUE_BATCH:
        raise InvalidRequest(
            f"runs must be a list of 1..{limits.MAX_ENQUEUE_BATCH} items", field="runs"
        )
    # Each item is validated on its own: one bad item gets a problem, the rest enqueue.
    slots: list[dict[str, Any] | None] = []
    requests: list[EnqueueRequest] = []
    for index, raw in enumerate(items):
        try:
            item = bodies.validated(models.BatchEnqueueItem, raw, f"runs[{index}]")
        except TickworkError as problem:
            slots.append({"problem": render.problem(problem)})
            continue
        if item.run_at is not None and item.delay_seconds is not None:
            slots.append(
                {
                    "problem": render.problem(
                        InvalidRequest(
                            "give at most one of runAt and delaySeconds",
                            field=f"runs[{index}].runAt",
                        )
                    )
                }
            )
            continue
        slots.append(None)
        requests.append(
            EnqueueRequest(
                run_at=item.run_at,
                delay_seconds=item.delay_seconds,
                payload=item.payload,
                payload_given="payload" in item.model_fields_set,
                idempotency_key=item.idempotency_key,
                key_field=f"runs[{index}].idempotencyKey",
                where=f"runs[{index}]",
            )
        )
    if requests and plain is None:  # a plain batch was admitted above
        await _admit(svc, owner, len(requests))
    enqueued = iter(
        await svc.jobs.enqueue_many(owner, name, requests, caller.subject) if requests else []
    )
    results = []
    for slot in slots:
        if slot is not None:
            results.append(slot)
            continue
        outcome = next(enqueued)
        if isinstance(outcome, TickworkError):
            results.append({"problem": render.problem(outcome)})
            continue
        run, created = outcome
        if created:
            svc.metrics.enqueued.inc()
        results.append(render.run(run))
    return responses.json({"items": results})


@router.get(
    "/jobs/{name}/runs",
    summary="The job's runs, newest first",
    responses={200: {"model": models.RunPage}, **_errors},
)
async def list_runs(
    name: JobName,
    caller: Caller,
    svc: Svc,
    state: Annotated[State | None, Query(description="Only runs in this state.")] = None,
    cursor: Cursor = None,
    limit: Limit = None,
    tenant: TenantParam = None,
) -> Response:
    owner = await access.tenant(caller, Operation.list_runs, tenant)
    _check_cursor(cursor, svc.jobs.locate_run, NotFound)
    page, next_cursor = await svc.jobs.runs_of_job(
        owner, parameters.job_name(name), state, cursor, _limit(svc, limit)
    )
    return responses.json({"items": [render.run(r) for r in page], "nextCursor": next_cursor})


@router.get(
    "/runs/{runId}",
    summary="One run with its attempts",
    responses={200: {"model": models.RunWithAttempts}, **_errors},
)
async def get_run(run_id: RunId, caller: Caller, svc: Svc) -> Response:
    run, attempts, _ = await access.run(caller, Operation.get_run, svc.jobs, run_id)
    return responses.json(render.run_with_attempts(run, attempts))


def _run_change(operation: Operation, change: RunChange) -> RunRoute:
    """The route that changes one run the caller may ``operation`` on: cancel it, replay
    or discard a dead one (``change``, a method of ``Jobs``)."""

    async def route(run_id: RunId, caller: Caller, svc: Svc) -> Response:
        _, _, scope = await access.run(caller, operation, svc.jobs, run_id)
        return responses.json(render.run(await change(svc.jobs, run_id, caller.subject, scope)))

    return route


cancel_run = router.post(
    "/runs/{runId}:cancel", name="cancel_run", summary="Cancel a run", responses=_run_change_answers
)(_run_change(Operation.cancel_run, Jobs.cancel))


@router.get(
    "/dlq", summary="Dead runs of the tenant", responses={200: {"model": models.RunPage}, **_errors}
)
async def list_dead(
    caller: Caller,
    svc: Svc,
    job: Annotated[
        str | None,
        Query(description="Only this job's dead runs.", json_schema_extra=models.NAME_SCHEMA),
    ] = None,
    cursor: Cursor = None,
    limit: Limit = None,
    tenant: TenantParam = None,
) -> Response:
    owner = await access.tenant(caller, Operation.list_dead, tenant)
    if job is not None:
        parameters.job_name(job)
    after = None if cursor is None else DeadCursor.decode(cursor)
    page, next_cursor = await svc.jobs.dead_letters(owner, job, after, _limit(svc, limit))
    return responses.json(
        {
            "items": [render.run(r) for r in page],
            "nextCursor": None if next_cursor is None else next_cursor.encode(),
        }
    )


replay = router.post(
    "/dlq/{runId}:replay",
    name="replay",
    summary="Re-enqueue a dead run with fresh attempts",
    responses=_run_change_answers,
)(_run_change(Operation.settle_dead, Jobs.replay))
discard = router.post(
    "/dlq/{runId}:discard", name="discard", summary="End a dead run", responses=_run_change_answers
)(_run_change(Operation.settle_dead, Jobs.discard))
