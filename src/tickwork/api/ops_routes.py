"""Operations: health, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from tickwork.api import access, models, responses
from tickwork.api.auth import Principal
from tickwork.api.services import principal, services
from tickwork.engine import metrics

router = APIRouter()


@router.get(
    "/healthz",
    summary="The process is alive (no authentication)",
    responses={200: {"model": models.Health}},
)
async def healthz() -> Response:
    return responses.json({"status": "ok"})


@router.get(
    "/readyz",
    summary="This process can serve: at least one shard serves (no authentication)",
    responses={
        200: {
            "model": models.Ready,
            "description": "Ready; `degraded` when some shards do not serve (`problems` says "
            "why, `down` which).",
        },
        503: {
            "model": models.NotReady,
            "description": "Not ready: no shard serves, or, before this process was first "
            "ready, a shard is still behind its schema. `problems` says why, `down` which.",
        },
    },
)
async def readyz(request: Request) -> Response:
    svc = services(request)
    found = await svc.engine.readiness(svc.settings.readiness_timeout_seconds)
    svc.metrics.set_shards_up(found.shards, found.down)
    problems = {"problems": list(found.problems), "down": list(found.down)}
    if not found.ready:
        return responses.json({"status": "unavailable", **problems}, 503)
    if found.problems:
        return responses.json({"status": "degraded", "shards": found.shards, **problems})
    return responses.json({"status": "ready", "shards": found.shards})


@router.get(
    "/metrics",
    summary="Prometheus metrics (admin and metrics tokens)",
    response_class=Response,
    responses={
        200: {
            "description": "The Prometheus text exposition format.",
            "content": {metrics.CONTENT_TYPE: {"schema": {"type": "string"}}},
        },
        401: {"model": models.Problem, "description": "unauthenticated"},
        403: {"model": models.Problem, "description": "forbidden (not an admin or metrics token)"},
    },
)
async def prometheus(
    request: Request, caller: Annotated[Principal, Depends(principal)]
) -> Response:
    # Every tenant's queue and job names: an admin's or a scraper's (a Kubernetes
    # principal needs RBAC's nonResourceURLs "/metrics", as kube-rbac-proxy asks).
    await access.check(caller, access.Operation.read_metrics)
    return Response(services(request).metrics.render(), media_type=metrics.CONTENT_TYPE)


@router.get("/openapi.json", summary="This document", include_in_schema=False)
async def openapi(request: Request, caller: Annotated[Principal, Depends(principal)]) -> Response:
    await access.check(caller, access.Operation.read_openapi)
    return responses.json(request.app.openapi())
