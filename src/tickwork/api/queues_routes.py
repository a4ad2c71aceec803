"""A tenant's queues: list them, pause and resume one (team and admin tokens).

A paused queue still takes enqueues; no claim leases its runs until it is resumed
(``engine.queues``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path
from starlette.responses import Response

from tickwork.api import access, models, parameters, render, responses
from tickwork.api.access import Operation
from tickwork.api.auth import Principal
from tickwork.api.parameters import Caller, Svc, TenantParam
from tickwork.api.services import Services
from tickwork.core import limits
from tickwork.core.spec import QUEUE_PATTERN
from tickwork.engine.queues import QueueState

router = APIRouter(prefix="/v1")

QueueName = Annotated[
    str,
    Path(
        description="The queue's name.",
        json_schema_extra={"pattern": QUEUE_PATTERN, "maxLength": limits.MAX_QUEUE_LENGTH},
    ),
]

QueueRoute = Callable[[str, Principal, Services, str | None], Awaitable[Response]]

_errors = parameters.problems({400: "invalid-request", 401: "unauthenticated", 403: "forbidden"})


def render_queue(state: QueueState) -> dict[str, Any]:
    return render.wire(state, "queue", "jobs", "paused", "paused_at", "paused_by")


@router.get(
    "/queues",
    summary="The tenant's queues: those its jobs name, and those paused",
    responses={200: {"model": models.QueuePage}, **_errors},
)
async def list_queues(caller: Caller, svc: Svc, tenant: TenantParam = None) -> Response:
    owner = await access.tenant(caller, Operation.list_queues, tenant)
    found = await svc.queues.list(owner)
    return responses.json({"items": [render_queue(q) for q in found], "nextCursor": None})


def _set_paused(paused: bool) -> QueueRoute:
    """The route that pauses (or resumes) a queue."""

    async def route(
        queue: QueueName, caller: Caller, svc: Svc, tenant: TenantParam = None
    ) -> Response:
        # One permission for both: whoever may pause a queue may resume it.
        owner = await access.tenant(caller, Operation.pause_queue, tenant, queue)
        queues = svc.queues
        change = queues.pause if paused else queues.resume
        state = await change(owner, parameters.queue_name(queue), caller.subject)
        return responses.json(render_queue(state))

    return route


parameters.pause_and_resume(
    router,
    "/queues/{queue}",
    "queue",
    (
        "Pause a queue: enqueues go on, no run is leased until it is resumed (idempotent)",
        "Resume a paused queue (idempotent)",
    ),
    {200: {"model": models.QueueState}, **_errors},
    _set_paused,
)
