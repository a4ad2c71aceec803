"""The worker path: lease (long-poll), heartbeat, complete, singly and in batches.

These routes take the raw request, parse it with orjson and check fields by hand, pass
job payloads through unparsed and render with orjson: on this path pydantic took about a
fifth of the server's CPU. The pydantic models in ``models`` still document them.
"""

from __future__ import annotations

import math
import os
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from tickwork.api import access, auth, bodies, edge, models, parameters, render, responses
from tickwork.api.services import Services, caller, services
from tickwork.core import fields, limits
from tickwork.core.errors import InvalidRequest, TickworkError
from tickwork.core.records import Completed, Extended, Lease, Outcome, Scope
from tickwork.core.spec import Priority, check_queue
from tickwork.engine.dispatch import CompleteItem, Dispatcher, HeartbeatItem, QueueGrant
from tickwork.engine.metrics import observe_all

router = APIRouter(prefix="/v1")

_DEFAULT_WORKER: Final = f"{socket.gethostname()}-{os.getpid()}"

# A heartbeat or a completion: the item read from a body (with its run id, and where in
# the body it is), and the dispatcher's method that reports a list of them.
Item = TypeVar("Item", HeartbeatItem, CompleteItem)
Parse = Callable[[dict[str, Any], str, str], Item]
Report = Callable[
    [Dispatcher, list[Item], Scope, QueueGrant | None],
    Awaitable[Sequence[Extended | Completed | TickworkError]],
]
RouteT = TypeVar("RouteT", bound=Callable[..., Awaitable[Response]])


def _schema(model: type[models.Model]) -> dict[str, Any]:
    return {
        # These routes authenticate by hand; declare the bearer scheme they require.
        "security": [{"HTTPBearer": []}],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": model.model_json_schema(ref_template="#/components/schemas/{model}")
                }
            },
        },
    }


_problems = {**parameters.ERRORS, **parameters.problems({409: "stale-lease"})}


def _reporter(request: Request) -> tuple[Services, Scope, QueueGrant | None]:
    """What a heartbeat or completion acts in, decided before its body is read."""
    scope, grant = access.reporting(caller(request))
    return services(request), scope, grant


def _number(
    document: dict[str, Any],
    key: str,
    default: float | None,
    low: float,
    high: float,
    where: str = "",
) -> float:
    value = document.get(key, default)
    if value is None:
        raise InvalidRequest(f"{where}{key} is required", field=where + key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRequest(f"{where}{key} must be a number", field=where + key)
    if not low <= value <= high:
        raise InvalidRequest(
            f"{where}{key} must be between {low:g} and {high:g}", field=where + key
        )
    return float(value)


def _token(document: dict[str, Any], where: str = "") -> int:
    value = document.get("fencingToken")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise InvalidRequest(
            f"{where}fencingToken must be a positive integer", field=where + "fencingToken"
        )
    return value


def _run_id(document: dict[str, Any], where: str) -> str:
    value = document.get("runId")
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{where}runId must be a string", field=where + "runId")
    return value


def _check_keys(document: dict[str, Any], allowed: frozenset[str], where: str = "") -> None:
    if document.keys() <= allowed:  # the common case, without building a set
        return
    unknown = set(document) - allowed
    if unknown:
        field = fields.key(where.removesuffix("."), sorted(unknown)[0])
        raise InvalidRequest(f"{field}: unknown field", field=field)


_LEASE_KEYS: Final = frozenset({"queues", "max", "waitSeconds", "leaseSeconds", "workerId"})
_BEAT_KEYS: Final = frozenset({"fencingToken", "extendSeconds"})
_COMPLETE_KEYS: Final = frozenset({"fencingToken", "outcome", "error", "delaySeconds"})
# A batch's items name their run as well (made once, not per item).
_BEAT_ITEM_KEYS: Final = _BEAT_KEYS | {"runId"}
_COMPLETE_ITEM_KEYS: Final = _COMPLETE_KEYS | {"runId"}
_OUTCOMES: Final = {outcome.value: outcome for outcome in Outcome}


def _items(document: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    _check_keys(document, frozenset({"items"}))
    items = document.get("items")
    if not isinstance(items, list) or not 1 <= len(items) <= limit:
        raise InvalidRequest(f"items must be a list of 1..{limit} objects", field="items")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRequest(f"items[{index}] must be an object", field=f"items[{index}]")
    return items


def _beat(document: dict[str, Any], run_id: str, where: str = "") -> HeartbeatItem:
    _check_keys(document, _BEAT_ITEM_KEYS if where else _BEAT_KEYS, where)
    return HeartbeatItem(
        run_id,
        _token(document, where),
        _number(
            document,
            "extendSeconds",
            limits.DEFAULT_LEASE_SECONDS,
            limits.MIN_LEASE_SECONDS,
            limits.MAX_LEASE_SECONDS,
            where,
        ),
    )


def _completion(document: dict[str, Any], run_id: str, where: str = "") -> CompleteItem:
    _check_keys(document, _COMPLETE_ITEM_KEYS if where else _COMPLETE_KEYS, where)
    token = _token(document, where)
    outcome = _OUTCOMES.get(document.get("outcome"))  # type: ignore[arg-type]
    if outcome is None:
        raise InvalidRequest(
            f"{where}outcome must be 'succeeded', 'failed' or 'snoozed'", field=where + "outcome"
        )
    delay = 0.0
    if outcome is Outcome.snoozed:
        delay = _number(document, "delaySeconds", None, 0, limits.MAX_SNOOZE_SECONDS, where)
    elif "delaySeconds" in document:
        raise InvalidRequest(
            f"{where}delaySeconds is for outcome 'snoozed' only", field=where + "delaySeconds"
        )
    error = document.get("error")
    retryable = True
    if error is not None:
        if not isinstance(error, dict) or not isinstance(error.get("message", ""), str):
            raise InvalidRequest(
                f"{where}error must be {{message, retryable}}", field=where + "error"
            )
        flag = error.get("retryable", True)
        if not isinstance(flag, bool):
            raise InvalidRequest(
                f"{where}error.retryable must be a boolean", field=where + "error.retryable"
            )
        retryable = flag
        problem = models.json_problem(error)
        if problem is not None:
            raise InvalidRequest(f"{where}error: {problem}", field=where + "error")
        if len(orjson.dumps(error)) > limits.MAX_ERROR_BYTES:
            raise InvalidRequest(
                f"{where}error is larger than {limits.MAX_ERROR_BYTES} bytes",
                field=where + "error",
            )
    return CompleteItem(run_id, token, outcome, error, retryable, delay)


def _count_refusal(svc: Services, error: TickworkError) -> None:
    svc.metrics.refusals.labels(error.slug).inc()


def _count_leases(svc: Services, granted: Sequence[Lease]) -> None:
    """Count a lease call's runs: one increment per (queue, priority) and per (job,
    priority) for the whole batch, and one lookup of each histogram's series per
    priority (a lookup per run was a sixth of the server's time on this path)."""
    if not granted:
        return
    metrics = svc.metrics
    by_run: Counter[tuple[str, str, str, int]] = Counter(
        (lease.tenant, lease.queue, lease.job, lease.priority) for lease in granted
    )
    by_queue: Counter[tuple[str, str, int]] = Counter()
    by_job: Counter[tuple[str, str, int]] = Counter()
    for (tenant, queue, job, rank), n in by_run.items():
        by_queue[(tenant, queue, rank)] += n
        by_job[(tenant, job, rank)] += n
    lags: dict[int, list[float]] = {}
    lates: dict[int, list[float]] = {}
    for lease in granted:
        if lease.attempt == 1:
            lags.setdefault(lease.priority, []).append(
                (lease.leased_at - lease.ready_at).total_seconds()
            )
            lates.setdefault(lease.priority, []).append(
                (lease.leased_at - lease.due_at).total_seconds()
            )
    for (tenant, queue, rank), n in by_queue.items():
        metrics.leases.labels(tenant, queue, Priority.from_rank(rank).value).inc(n)
    for (tenant, job, rank), n in by_job.items():
        label = metrics.job_label(tenant, job)
        metrics.job_leases.labels(label, Priority.from_rank(rank).value).inc(n)
    for histogram, values in ((metrics.start_lag, lags), (metrics.schedule_lag, lates)):
        for rank, seconds in values.items():
            series = histogram.labels(Priority.from_rank(rank).value)
            observe_all(series, [max(value, 0.0) for value in seconds])


@router.post(
    "/lease",
    summary="Lease up to max runs (long-poll up to waitSeconds)",
    openapi_extra=_schema(models.LeaseRequest),
    responses={200: {"model": models.LeaseResponse}, **_problems},
)
async def lease(request: Request) -> Response:
    svc, who = services(request), caller(request)
    access.admit(who, access.Operation.lease)
    document = await bodies.json_object(request)
    _check_keys(document, _LEASE_KEYS)
    queues = document.get("queues")
    if not isinstance(queues, list) or not 1 <= len(queues) <= limits.MAX_LEASE_QUEUES:
        raise InvalidRequest(
            f"queues must be a list of 1..{limits.MAX_LEASE_QUEUES} queue names", field="queues"
        )
    for index, queue in enumerate(queues):
        try:
            if not isinstance(queue, str):
                raise ValueError("a queue name is a string")
            check_queue(queue)
        except ValueError as error:
            raise InvalidRequest(f"queues[{index}]: {error}", field=f"queues[{index}]") from None
    tenant = await access.lease_queues(who, queues)
    limit = int(_number(document, "max", 1, 1, limits.MAX_LEASE_BATCH))
    # Not 5.0 either: the contract reads an integer as written, as fencingToken's.
    if type(document.get("max", 1)) is not int:
        raise InvalidRequest("max must be an integer", field="max")
    wait = _number(document, "waitSeconds", 0, 0, limits.MAX_WAIT_SECONDS)
    lease_seconds = _number(
        document,
        "leaseSeconds",
        limits.DEFAULT_LEASE_SECONDS,
        limits.MIN_LEASE_SECONDS,
        limits.MAX_LEASE_SECONDS,
    )
    worker_id = document.get("workerId") or _DEFAULT_WORKER
    if (
        not isinstance(worker_id, str)
        or len(worker_id) > limits.MAX_WORKER_ID_LENGTH
        or models.text_problem(worker_id) is not None
    ):
        raise InvalidRequest(
            f"workerId must be text of at most {limits.MAX_WORKER_ID_LENGTH} characters, "
            "without NUL",
            field="workerId",
        )
    revoked = auth.Revocation(svc.authenticator, request)
    granted = await svc.dispatcher.lease(
        queues,
        limit=limit,
        worker_id=worker_id,
        lease_seconds=lease_seconds,
        tenant=tenant,
        wait_seconds=wait,
        recheck_seconds=svc.settings.long_poll_recheck_seconds,
        gone=revoked.or_gone(edge.client_gone(request)),
    )
    revoked.check()
    _count_leases(svc, granted)
    return responses.json({"leases": [render.lease(item) for item in granted]})


def _single(result: Extended | Completed | TickworkError, svc: Services) -> Response:
    if isinstance(result, TickworkError):
        _count_refusal(svc, result)
        raise result
    if isinstance(result, Extended):
        return responses.json(render.extended(result))
    svc.metrics.completions.labels(_completion_label(result)).inc()
    return responses.json(render.completed(result))


def _completion_label(result: Completed) -> str:
    """The ``state`` label of ``tickwork_completions``: a snooze is told apart from a
    retry, though both leave the run in retry_wait."""
    return "snoozed" if result.snoozed else result.state.value


@dataclass(frozen=True)
class _Reports(Generic[Item]):
    """Heartbeats or completions: ``POST /runs/{runId}/<verb>`` for one leased run and
    ``POST /runs:<verb>`` for a batch of at most ``limit``."""

    verb: str
    parse: Parse[Item]
    report: Report[Item]
    limit: int

    def one(
        self, summary: str, body: type[models.Model], answer: type[models.Model]
    ) -> Callable[[str, Request], Awaitable[Response]]:
        async def route(runId: str, request: Request) -> Response:
            svc, scope, grant = _reporter(request)
            item = self.parse(await bodies.json_object(request), runId, "")
            [result] = await self.report(svc.dispatcher, [item], scope, grant)
            return _single(result, svc)

        path = f"/runs/{{runId}}/{self.verb}"
        return self._post(path, self.verb, summary, body, answer)(route)

    def many(
        self, summary: str, body: type[models.Model], answer: type[models.Model]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def route(request: Request) -> Response:
            svc, scope, grant = _reporter(request)
            items = _items(await bodies.json_object(request), self.limit)
            parsed = [
                self.parse(item, _run_id(item, f"items[{i}]."), f"items[{i}].")
                for i, item in enumerate(items)
            ]
            results = await self.report(svc.dispatcher, parsed, scope, grant)
            return _batch_results(svc, [p.run_id for p in parsed], results)

        summary += " (one statement per shard touched)"
        return self._post(f"/runs:{self.verb}", f"{self.verb}_batch", summary, body, answer)(route)

    @staticmethod
    def _post(
        path: str, name: str, summary: str, body: type[models.Model], answer: type[models.Model]
    ) -> Callable[[RouteT], RouteT]:
        return router.post(
            path,
            name=name,
            summary=summary,
            openapi_extra=_schema(body),
            responses={200: {"model": answer}, **_problems},
        )


def _batch_results(
    svc: Services,
    run_ids: Sequence[str],
    results: Sequence[Extended | Completed | TickworkError],
) -> Response:
    rendered: list[dict[str, Any]] = []
    states: Counter[str] = Counter()
    for run_id, result in zip(run_ids, results, strict=True):
        if isinstance(result, TickworkError):
            _count_refusal(svc, result)
            rendered.append({"runId": run_id, "problem": render.problem(result)})
        elif isinstance(result, Extended):
            rendered.append({"runId": run_id, **render.extended(result)})
        else:
            states[_completion_label(result)] += 1
            rendered.append({"runId": run_id, **render.completed(result)})
    for state, n in states.items():
        svc.metrics.completions.labels(state).inc(n)
    return responses.json({"items": rendered})


_HEARTBEATS = _Reports("heartbeat", _beat, Dispatcher.heartbeat, limits.MAX_HEARTBEAT_BATCH)
_COMPLETIONS = _Reports("complete", _completion, Dispatcher.complete, limits.MAX_COMPLETE_BATCH)
heartbeat = _HEARTBEATS.one("Extend a lease", models.HeartbeatRequest, models.HeartbeatResponse)
complete = _COMPLETIONS.one(
    "Report the outcome of a leased run", models.CompleteRequest, models.CompleteResponse
)
heartbeat_batch = _HEARTBEATS.many(
    "Heartbeat many leased runs", models.HeartbeatBatchRequest, models.HeartbeatResults
)
complete_batch = _COMPLETIONS.many(
    "Complete many leased runs", models.CompleteBatchRequest, models.CompleteResults
)
