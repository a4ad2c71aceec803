"""The audit log: who changed which job or run, newest first (team and admin tokens)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.responses import Response

from tickwork.api import access, models, parameters, render, responses
from tickwork.api.parameters import Caller, Cursor, Limit, Svc, TenantParam
from tickwork.engine import audit
from tickwork.engine.cursors import Position

router = APIRouter(prefix="/v1")


@router.get(
    "/audit",
    summary="The tenant's audit log, newest first",
    responses={
        200: {"model": models.AuditPage},
        **parameters.problems({400: "invalid-request", 403: "forbidden"}),
    },
)
async def list_audit(
    caller: Caller,
    svc: Svc,
    job: Annotated[
        str | None,
        Query(description="Only this job's entries.", json_schema_extra=models.NAME_SCHEMA),
    ] = None,
    cursor: Cursor = None,
    limit: Limit = None,
    tenant: TenantParam = None,
) -> Response:
    owner = await access.tenant(caller, access.Operation.list_audit, tenant)
    parameters.job_filter(job)
    after = None if cursor is None else Position.decode(cursor)
    size = limit or svc.settings.default_page_size
    page, next_cursor = await audit.entries(svc.engine.database, owner, job, after, size)
    return responses.json(
        {
            "items": [render.audit_entry(entry) for entry in page],
            "nextCursor": None if next_cursor is None else next_cursor.encode(),
        }
    )
