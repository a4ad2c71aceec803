"""Bulk operations (replay, discard or cancel every run matching a filter, in the
background, with progress) and runs by filter across jobs (team and admin tokens).

The filter is always within the tenant the call acts for; the runs are acted on by the
schedulers, shard by shard, in batches (``engine.operations``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, Final

from fastapi import APIRouter, Path, Query, Request
from pydantic import TypeAdapter, ValidationError
from starlette.responses import Response

from tickwork.api import access, bodies, models, render, responses
from tickwork.api import operation_models as om
from tickwork.api.access import Operation
from tickwork.api.auth import Principal
from tickwork.api.parameters import ERRORS, Caller, Cursor, Limit, Svc, TenantParam
from tickwork.api.services import Services
from tickwork.core import limits
from tickwork.core import operations as core
from tickwork.core.errors import InvalidRequest
from tickwork.core.spec import Instant
from tickwork.engine import operations as engine
from tickwork.engine.cursors import Position

router = APIRouter(prefix="/v1")

OPERATION_ID: Final = re.compile(r"^op-[0-9a-f]{1,60}$")
OperationId = Annotated[
    str,
    Path(
        alias="operationId",
        description="The operation's id (op-…).",
        json_schema_extra={"pattern": OPERATION_ID.pattern, "maxLength": 63},
    ),
]
_INSTANT_SCHEMA: Final = {"format": "date-time"}
_INSTANT: Final = TypeAdapter(Instant)


def render_filter(found: core.Filter) -> dict[str, Any]:
    return found.document()


def render_operation(item: engine.Operation) -> dict[str, Any]:
    return {
        "id": item.id,
        "tenant": item.tenant,
        "action": item.action.value,
        "filter": render_filter(item.filter),
        "state": item.state.value,
        "total": item.total,
        "processed": item.processed,
        "percent": item.percent,
        "actor": item.actor,
        "createdAt": item.created_at,
        "updatedAt": item.updated_at,
        "finishedAt": item.finished_at,
        "shards": [
            {
                "shard": row.shard,
                "state": row.state.value,
                "total": row.total,
                "processed": row.processed,
            }
            for row in item.shards
        ],
    }


def _checked_id(operation_id: str) -> str:
    if not OPERATION_ID.fullmatch(operation_id):
        raise InvalidRequest("an operation id starts with op-", field="operationId")
    return operation_id


@router.post(
    "/operations",
    summary="Replay, discard or cancel every run matching a filter, in the background",
    status_code=202,
    responses={
        202: {"model": om.Operation, "description": "The operation, started"},
        200: {"model": om.OperationCount, "description": "dryRun: how many runs match"},
        **ERRORS,
    },
    openapi_extra=bodies.openapi(om.OperationRequest, required=True),
)
async def create_operation(
    caller: Caller, svc: Svc, request: Request, tenant: TenantParam = None
) -> Response:
    owner = await access.tenant(caller, Operation.create_operation, tenant)
    body = await bodies.model(request, om.OperationRequest, required=True)
    assert body is not None
    action = core.Action(body.action)
    given = body.filter
    found = core.checked(
        job=given.job,
        job_pattern=given.job_pattern,
        state=given.state,
        from_=given.from_,
        to=given.to,
        error_contains=given.error_contains,
        min_attempts=given.min_attempts,
        max_attempts=given.max_attempts,
        action=action,
        prefix="filter.",
    )
    operations = svc.operations
    if body.dry_run:
        total = await operations.count(owner, action, found)
        return responses.json(
            {
                "dryRun": True,
                "action": action.value,
                "filter": render_filter(found),
                "total": total,
            }
        )
    made = await operations.create(owner, action, found, caller.subject)
    return responses.json(render_operation(made), 202)


@router.get(
    "/operations",
    summary="The tenant's recent operations, newest first",
    responses={200: {"model": om.OperationPage}, **ERRORS},
)
async def list_operations(
    caller: Caller,
    svc: Svc,
    limit: Annotated[
        int | None,
        Query(ge=1, le=limits.MAX_PAGE_SIZE, description="How many (default 20)."),
    ] = None,
    tenant: TenantParam = None,
) -> Response:
    owner = await access.tenant(caller, Operation.list_operations, tenant)
    found = await svc.operations.recent(owner, limit or 20)
    return responses.json({"items": [render_operation(item) for item in found]})


def _on_operation(
    operation: Operation,
    act: Callable[[engine.Operations, str, str], Awaitable[engine.Operation]],
) -> Callable[[str, Principal, Services, str | None], Awaitable[Response]]:
    """The route that reads (or cancels) one operation of the tenant, and answers it."""

    async def route(
        operation_id: OperationId, caller: Caller, svc: Svc, tenant: TenantParam = None
    ) -> Response:
        owner = await access.tenant(caller, operation, tenant)
        found = await act(svc.operations, owner, _checked_id(operation_id))
        return responses.json(render_operation(found))

    return route


get_operation = router.get(
    "/operations/{operationId}",
    name="get_operation",
    summary="An operation and its progress",
    responses={200: {"model": om.Operation}, **ERRORS},
)(_on_operation(Operation.get_operation, engine.Operations.get))
cancel_operation = router.post(
    "/operations/{operationId}:cancel",
    name="cancel_operation",
    summary="Stop an operation (what it did stays done; idempotent)",
    responses={200: {"model": om.Operation}, **ERRORS},
)(_on_operation(Operation.cancel_operation, engine.Operations.cancel))


def instant(text: str | None, field: str) -> datetime | None:
    """A query parameter's RFC 3339 instant (400 naming it otherwise)."""
    if text is None:
        return None
    try:
        value: datetime = _INSTANT.validate_python(text)
    except ValidationError:
        raise InvalidRequest(
            f"{field} must be an RFC 3339 instant with an offset, like 2026-03-15T02:00:00Z",
            field=field,
        ) from None
    return value


@router.get(
    "/runs",
    summary="The tenant's runs in one state across jobs, newest first",
    responses={200: {"model": models.RunPage}, **ERRORS},
)
async def list_runs_by_state(
    caller: Caller,
    svc: Svc,
    state: Annotated[
        str,
        Query(
            description="The runs' state.", json_schema_extra={"enum": list(models.State.__args__)}
        ),
    ],
    job: Annotated[str | None, Query(json_schema_extra=models.NAME_SCHEMA)] = None,
    job_pattern: Annotated[
        str | None,
        Query(
            alias="jobPattern",
            description="A glob over job names: * any characters, ? one.",
            json_schema_extra=om.GLOB_SCHEMA,
        ),
    ] = None,
    from_: Annotated[
        str | None,
        Query(
            alias="from",
            description="finishedAt (finished runs) or dueAt (others) at or after.",
            json_schema_extra=_INSTANT_SCHEMA,
        ),
    ] = None,
    to: Annotated[
        str | None,
        Query(description="... and before.", json_schema_extra=_INSTANT_SCHEMA),
    ] = None,
    error_contains: Annotated[
        str | None,
        Query(alias="errorContains", min_length=1, max_length=core.MAX_ERROR_TEXT),
    ] = None,
    min_attempts: Annotated[
        int | None, Query(alias="minAttempts", ge=0, le=core.MAX_ATTEMPTS)
    ] = None,
    max_attempts: Annotated[
        int | None, Query(alias="maxAttempts", ge=0, le=core.MAX_ATTEMPTS)
    ] = None,
    cursor: Cursor = None,
    limit: Limit = None,
    tenant: TenantParam = None,
) -> Response:
    owner = await access.tenant(caller, Operation.list_runs, tenant)
    found = core.checked(
        job=job,
        job_pattern=job_pattern,
        state=state,
        from_=instant(from_, "from"),
        to=instant(to, "to"),
        error_contains=error_contains,
        min_attempts=min_attempts,
        max_attempts=max_attempts,
    )
    after = None if cursor is None else Position.decode(cursor)
    size = limit or svc.settings.default_page_size
    page, next_cursor = await svc.operations.runs(owner, found, after, size)
    return responses.json(
        {
            "items": [render.run(r) for r in page],
            "nextCursor": None if next_cursor is None else next_cursor.encode(),
        }
    )
