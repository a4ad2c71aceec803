"""Run a handler in a unit test, without a server: ``tickwork.testing``.

``run_handler`` builds the ``RunContext`` a worker would hand the handler (every field
can be set: ``attempt``, ``dry_run``, ``job``, ...), calls the handler the way the
worker does (the payload validated into a typed payload parameter, ``NonRetryableError``
and ``InvalidPayload`` failing for good, any other exception failing as retryable) and
returns what the worker would report, instead of raising.

Given a ``Worker`` instead of a function, the handler is found as the worker finds it
(the job's, the queue's, the default) and a dry run goes only to a handler registered
with ``dry_run=True``: what the worker does with the run, registrations included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import field
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict, Unpack

import pydantic_core

from tickwork.core import limits
from tickwork.core.hot import hot_record
from tickwork.worker import execution
from tickwork.worker.client import Lease
from tickwork.worker.context import RunContext
from tickwork.worker.handlers import Handler, Handlers, InThread
from tickwork.worker.runner import Worker

DEFAULT_JOB = "test-job"
DEFAULT_TENANT = "test"
DEFAULT_RUN_ID = "r0-1"
DEFAULT_WORKER_ID = "test-worker"


@hot_record
class HandlerResult(execution.Performed):
    """What became of the run, as the worker would report it (its ``Performed``), with
    the run's ``context``.

    ``outcome`` is ``succeeded``, ``failed`` or ``snoozed`` (``delay_seconds`` says
    for how long: the handler raised or returned ``Snooze``); a failure has the
    ``message`` the worker
    sends (``"<ExceptionType>: <message>"``), ``retryable`` (False: the run would go to
    the DLQ at once) and the ``error`` raised. ``returned`` is what the handler returned
    (the worker ignores it). ``skipped``: a dry run the worker's handler does not
    support, completed as succeeded without calling it.
    """

    context: RunContext = field(kw_only=True)

    @property
    def succeeded(self) -> bool:
        return self.outcome == "succeeded"

    @property
    def failed(self) -> bool:
        return self.outcome == "failed"

    @property
    def snoozed(self) -> bool:
        return self.outcome == "snoozed"


class RunOptions(TypedDict, total=False):
    """What ``run_handler`` and ``run_handler_async`` take besides the payload: the
    keyword arguments of ``make_context`` (its defaults apply to those not given)."""

    job: str
    queue: str
    tenant: str
    priority: str
    attempt: int
    dry_run: bool
    run_id: str
    idempotency_key: str | None
    fencing_token: int
    due_at: datetime | None
    lease_expires_at: datetime | None
    deadline: datetime | None
    cancel_requested: bool
    worker_id: str


def make_context(
    payload: Any = None,
    *,
    job: str = DEFAULT_JOB,
    queue: str = "default",
    tenant: str = DEFAULT_TENANT,
    priority: str = "default",
    attempt: int = 1,
    dry_run: bool = False,
    run_id: str = DEFAULT_RUN_ID,
    idempotency_key: str | None = None,
    fencing_token: int = 1,
    due_at: datetime | None = None,
    lease_expires_at: datetime | None = None,
    deadline: datetime | None = None,
    cancel_requested: bool = False,
    worker_id: str = DEFAULT_WORKER_ID,
) -> RunContext:
    """The ``RunContext`` a worker would give a handler for such a run.

    The payload is passed through JSON as the API would hand it over (a model or a
    dataclass becomes its JSON object, a tuple a list, a datetime a string). Unless
    given, ``idempotency_key`` is the API's for an enqueued run
    (``<tenant>/<job>#<run_id>``), ``due_at`` is now, the lease runs out in 30 s and
    the deadline (the job's timeout) is an hour away. ``cancel_requested``: the run was
    cancelled through the API before the handler started (``ctx.cancelled`` is set).
    """
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    now = datetime.now(UTC)
    lease = Lease(
        run_id=run_id,
        job=job,
        tenant=tenant,
        queue=queue,
        priority=priority,
        attempt=attempt,
        idempotency_key=f"{tenant}/{job}#{run_id}" if idempotency_key is None else idempotency_key,
        fencing_token=fencing_token,
        due_at=now if due_at is None else due_at,
        lease_expires_at=(
            now + timedelta(seconds=limits.DEFAULT_LEASE_SECONDS)
            if lease_expires_at is None
            else lease_expires_at
        ),
        deadline=now + timedelta(hours=1) if deadline is None else deadline,
        payload=pydantic_core.to_jsonable_python(payload),
        dry_run=dry_run,
    )
    context = RunContext(lease, worker_id)
    if cancel_requested:
        context._request_cancel()
    return context


def run_handler(
    handler: Handler | Worker,
    payload: Any = None,
    **run: Unpack[RunOptions],
) -> HandlerResult:
    """Run ``handler`` (a function, or a ``Worker`` whose handler for ``job`` runs) for
    one run built by ``make_context`` from the other arguments, and return what the
    worker would report.

    A plain ``def`` handler is called in this thread; an ``async def`` one on an event
    loop of its own (``asyncio.run``). Inside a running event loop (an async test),
    ``await run_handler_async(...)`` instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            "run_handler called inside a running event loop: await run_handler_async(...)"
        )
    context = make_context(payload, **run)
    return asyncio.run(_perform(handler, context, _in_this_thread))


async def run_handler_async(
    handler: Handler | Worker,
    payload: Any = None,
    **run: Unpack[RunOptions],
) -> HandlerResult:
    """``run_handler`` on the running event loop: an ``async def`` handler runs on it,
    a plain ``def`` one in a thread (as the worker runs it), so it may call what the
    test serves on this loop."""
    context = make_context(payload, **run)
    return await _perform(handler, context, asyncio.to_thread)


async def _in_this_thread(function: Callable[[], object]) -> object:
    return function()


async def _perform(
    handler: Handler | Worker,
    context: RunContext,
    in_thread: InThread,
) -> HandlerResult:
    if isinstance(handler, Worker):
        registry = handler._handlers
    else:
        # The function alone, as the default handler: it runs whatever the run's job,
        # dry runs included (the test checks what it does with ``ctx.dry_run``).
        registry = Handlers()
        registry.register(handler, dry_run=True)
    performed = await execution.perform(registry, context, in_thread, context.worker_id)
    return HandlerResult(
        outcome=performed.outcome,
        context=context,
        message=performed.message,
        retryable=performed.retryable,
        error=performed.error,
        returned=performed.returned,
        skipped=performed.skipped,
        delay_seconds=performed.delay_seconds,
    )
