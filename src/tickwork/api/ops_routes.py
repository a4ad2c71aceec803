"""Operations: health, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from tickwork.api import auth, models, responses
from tickwork.api.auth import Principal
from tickwork.api.services import principal, services
from tickwork.core.errors import SchemaMismatch
from tickwork.engine import metrics
from tickwork.store import migrate, outages

router = APIRouter()


@router.get("/healthz", summary="The process is alive (no authentication)")
async def healthz() -> Response:
    return responses.json({"status": "ok"})


# Checks that outlive their bound are left to finish on their own, within the pool's
# statement timeout (cancelling one stuck on a hung link would not end it sooner); their
# tasks are kept here until they do.
_abandoned: set[asyncio.Task[str | None]] = set()


@router.get(
    "/readyz",
    summary="Every shard is reachable and migrated (no authentication)",
    responses={503: {"description": "Not ready: `problems` says why, `down` which shards."}},
)
async def readyz(request: Request) -> Response:
    svc = services(request)
    shard_map = svc.database.shard_map
    bound = svc.settings.readiness_timeout_seconds

    async def check(number: int) -> str | None:
        try:
            async with svc.database.connection(number) as conn:
                await migrate.check_shard(conn, shard_map[number], shard_map.count)
        except SchemaMismatch as error:
            return error.detail
        except Exception as error:
            if not outages.is_outage(error):
                raise
            return f"shard {number} unreachable: {outages.describe(error)}"
        return None

    tasks = [asyncio.create_task(check(n)) for n in range(shard_map.count)]
    _, late = await asyncio.wait(tasks, timeout=bound)
    for task in late:
        _abandoned.add(task)
        task.add_done_callback(_abandoned.discard)
    failures: list[str] = []
    down: list[int] = []
    for number, task in enumerate(tasks):
        if task in late:
            failure: str | None = f"shard {number} unreachable: no answer within {bound:g}s"
        else:
            failure = task.result()
        if failure is not None:
            failures.append(failure)
            down.append(number)
    if failures:
        return responses.json({"status": "unavailable", "problems": failures, "down": down}, 503)
    return responses.json({"status": "ready", "shards": shard_map.count})


@router.get(
    "/metrics",
    summary="Prometheus metrics (any valid token)",
    response_class=Response,
    responses={
        200: {
            "description": "The Prometheus text exposition format.",
            "content": {metrics.CONTENT_TYPE: {"schema": {"type": "string"}}},
        },
        401: {"model": models.Problem, "description": "unauthenticated"},
    },
)
async def prometheus(
    request: Request, caller: Annotated[Principal, Depends(principal)]
) -> Response:
    # A Kubernetes principal needs RBAC's nonResourceURLs "/metrics" (as kube-rbac-proxy
    # asks), so a scrape token is not a key to every tenant's queue names.
    await auth.authorize(caller, auth.Action("get", path="/metrics"))
    return Response(services(request).metrics.render(), media_type=metrics.CONTENT_TYPE)


@router.get("/openapi.json", summary="This document", include_in_schema=False)
async def openapi(request: Request, _caller: Annotated[Principal, Depends(principal)]) -> Response:
    return responses.json(request.app.openapi())
