"""A tenant's queues: list them, pause and resume one (team and admin tokens).

A paused queue still takes enqueues; no claim leases its runs until it is resumed
(``engine.queues``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from starlette.responses import Response

from tickwork.api import access, models, parameters, responses
from tickwork.api.access import Operation
from tickwork.api.auth import Principal
from tickwork.api.parameters import Caller, Svc, TenantParam
from tickwork.api.services import Services
from tickwork.core import limits
from tickwork.core.errors import InvalidRequest
from tickwork.core.spec import QUEUE_PATTERN, check_queue
from tickwork.engine.queues import Queues, QueueState

router = APIRouter(prefix="/v1")

QueueName = Annotated[
    str,
    Path(
        description="The queue's name.",
        json_schema_extra={"pattern": QUEUE_PATTERN, "maxLength": limits.MAX_QUEUE_LENGTH},
    ),
]

_errors = parameters.problems({400: "invalid-request", 401: "unauthenticated", 403: "forbidden"})


def queues_of(svc: Services) -> Queues:
    return Queues(svc.engine.database, svc.engine.clock)


def render_queue(state: QueueState) -> dict[str, Any]:
    return {
        "queue": state.queue,
        "jobs": state.jobs,
        "paused": state.paused,
        "pausedAt": state.paused_at,
        "pausedBy": state.paused_by,
    }


def _checked(queue: str) -> str:
    try:
        check_queue(queue)
    except ValueError as error:
        raise InvalidRequest(str(error), field="queue") from error
    return queue


@router.get(
    "/queues",
    summary="The tenant's queues: those its jobs name, and those paused",
    responses={200: {"model": models.QueuePage}, **_errors},
)
async def list_queues(caller: Caller, svc: Svc, tenant: TenantParam = None) -> Response:
    owner = await access.tenant(caller, Operation.list_queues, tenant)
    found = await queues_of(svc).list(owner)
    return responses.json({"items": [render_queue(q) for q in found], "nextCursor": None})


@router.post(
    "/queues/{queue}:pause",
    summary="Pause a queue: enqueues go on, no run is leased until it is resumed (idempotent)",
    responses={200: {"model": models.QueueState}, **_errors},
)
async def pause_queue(
    queue: QueueName, caller: Caller, svc: Svc, tenant: TenantParam = None
) -> Response:
    return await _set_paused(queue, caller, svc, tenant, paused=True)


@router.post(
    "/queues/{queue}:resume",
    summary="Resume a paused queue (idempotent)",
    responses={200: {"model": models.QueueState}, **_errors},
)
async def resume_queue(
    queue: QueueName, caller: Caller, svc: Svc, tenant: TenantParam = None
) -> Response:
    return await _set_paused(queue, caller, svc, tenant, paused=False)


async def _set_paused(
    queue: str, caller: Principal, svc: Services, tenant: str | None, *, paused: bool
) -> Response:
    # One permission for both: whoever may pause a queue may resume it.
    owner = await access.tenant(caller, Operation.pause_queue, tenant, queue)
    queues = queues_of(svc)
    change = queues.pause if paused else queues.resume
    state = await change(owner, _checked(queue), caller.subject)
    return responses.json(render_queue(state))
