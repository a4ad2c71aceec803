"""Running leased runs: each handler called, its outcome turned into a completion.

The runs of a leased batch whose handlers are plain functions go to the handler threads
together, as one unit (``HandlerThreads.run_batch``) with one task to wait for them all;
each other run (an ``async def`` handler, no handler, a dry run skipped) gets a task of
its own. A task and a thread hand-off per run were most of what a worker spent on a
short handler.

Returning from the handler is success; ``NonRetryableError`` fails the run for good;
``Snooze`` (raised or returned) puts it back for a while without using an attempt; any
other exception fails it as retryable; a handler cancelled by the drain fails it as
retryable too, so it is retried at once rather than after its lease.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Final, cast

from tickwork.core.hot import hot_record
from tickwork.worker import completions, handlers
from tickwork.worker.client import Completion, Lease, Outcome
from tickwork.worker.context import NonRetryableError, RunContext, Snooze
from tickwork.worker.session import Held, Session

log: Final = logging.getLogger("tickwork.worker")

MAX_MESSAGE: Final = 4000


def start_all(session: Session, leases: Sequence[Lease]) -> None:
    """Hold each of ``leases`` and start its handler."""
    settings = session.settings
    registry = session.handlers
    next_beat = session.loop.time() + settings.lease_seconds / 3
    debug = log.isEnabledFor(logging.DEBUG)
    plain: list[tuple[Held, handlers.Calling]] = []
    for lease in leases:
        context = RunContext(lease, settings.worker_id)
        held = Held(context, next_beat=next_beat)
        session.held[context.run_id] = held
        calling = registry.calling_for(context.job, context.queue)
        if (
            calling is None
            or calling.is_async
            or (context.dry_run and not registry.supports_dry_run(context.job, context.queue))
        ):
            _start_task(session, held, execute(session, held))
        else:
            plain.append((held, calling))
        if debug:
            log.debug(
                "leased %s (%s, attempt %d)",
                context.run_id,
                context.job,
                context.attempt,
                extra={"action": "leased", "run_id": context.run_id},
            )
        session.signals.leased.signal(lease)
    if plain:
        _PlainRuns(session, plain)
    session.beat_wakeup.set()


def _start_task(session: Session, held: Held, work: Coroutine[Any, Any, None]) -> None:
    """Run one held run's ``work`` in a task of its own."""
    session.running += 1
    task = session.loop.create_task(work, name=f"tickwork-run-{held.context.run_id}")
    session.tasks.add(task)

    def done(task: asyncio.Task[None]) -> None:
        session.tasks.discard(task)
        session.running -= 1
        session.slot_freed.set()

    task.add_done_callback(done)


class _PlainRuns:
    """The runs of one leased batch whose handlers are plain functions: called in the
    handler threads as one unit, each finished as its handler returns, and a task that
    ends when all have (cancelled by a drain's timeout or ``stop(force=True)``, it fails
    those not finished, as a run's own task does)."""

    __slots__ = ("_batch", "_ended", "_left", "_open", "_session")

    def __init__(self, session: Session, items: list[tuple[Held, handlers.Calling]]) -> None:
        """Start the handlers of ``items`` in the threads, and the task for them all."""
        self._session = session
        self._open: list[Held | None] = [held for held, _ in items]
        self._left = len(items)
        self._ended: asyncio.Future[None] = session.loop.create_future()
        session.running += self._left
        task = session.loop.create_task(self._wait(), name="tickwork-runs")
        session.tasks.add(task)
        task.add_done_callback(session.tasks.discard)
        # Each call with the context variables of the lease loop, as one run's task has.
        calls = [
            functools.partial(contextvars.copy_context().run, _perform_plain, calling, held.context)
            for held, calling in items
        ]
        self._batch = session.threads.run_batch(calls, self._done)

    async def _wait(self) -> None:
        try:
            await self._ended
        except asyncio.CancelledError:
            self._batch.cancel()  # not started: they never will be
            for index, held in enumerate(self._open):
                if held is not None:
                    failed = failure(held.context, "worker stopped before the handler finished")
                    self._end(index, held, failed)
            raise

    def _done(self, index: int, result: object, error: BaseException | None) -> None:
        held = self._open[index]
        if held is None:
            return  # given up on by the drain: its outcome is not reported
        context = held.context
        if isinstance(result, Performed):
            self._end(index, held, _completion(context, result))
        elif error is not None:
            # Raised past _perform_plain: not an Exception (SystemExit, KeyboardInterrupt).
            _log_failure(context, error, "failed")
            self._end(index, held, failure(context, message_of(error)))
        else:
            # A plain function that returned an awaitable: awaited on the loop, as by
            # ``handlers.call``, in a task of the run's own.
            self._open[index] = None
            _start_task(self._session, held, _awaited(self._session, held, result))
            self._ended_one()

    def _end(self, index: int, held: Held, completion: Completion) -> None:
        self._open[index] = None
        completions.finish(self._session, held, completion)
        self._ended_one()

    def _ended_one(self) -> None:
        session = self._session
        session.running -= 1
        session.slot_freed.set()
        self._left -= 1
        if self._left == 0 and not self._ended.done():
            self._ended.set_result(None)


def _perform_plain(calling: handlers.Calling, context: RunContext) -> object:
    """In a handler thread: call a plain handler, and what it did, as ``perform``
    says; an awaitable it returned, to be awaited on the loop."""
    function: Callable[..., object] = calling.function
    try:
        returned = function(*calling.arguments(context))
    except Exception as error:
        return _raised(context, error)
    if inspect.isawaitable(returned):
        return returned
    return _returned(context, returned)


async def _awaited(session: Session, held: Held, awaitable: object) -> None:
    context = held.context
    completion: Completion | None = None
    try:
        try:
            returned = await cast(Awaitable[object], awaitable)
        except Exception as error:
            performed = _raised(context, error)
        else:
            performed = _returned(context, returned)
        completion = _completion(context, performed)
    except asyncio.CancelledError:
        completion = failure(context, "worker stopped before the handler finished")
        raise
    finally:
        completions.finish(session, held, completion)


@hot_record
class Performed:
    """What a handler did with a run, as the worker reports it: ``message`` and
    ``retryable`` for a failure, ``delay_seconds`` for a snooze, ``skipped`` for a dry
    run its handler does not support (reported as succeeded, untouched)."""

    outcome: Outcome
    message: str | None = None
    retryable: bool = True
    error: BaseException | None = None
    returned: object = None
    skipped: bool = False
    delay_seconds: float = 0.0


async def perform(
    registry: handlers.Handlers, context: RunContext, in_thread: handlers.InThread, worker_id: str
) -> Performed:
    """Find the run's handler and run it to its end: the one path from a leased run to
    its outcome, for the worker and for ``tickwork.testing`` alike. A cancelled handler
    raises ``CancelledError`` through."""
    calling = registry.calling_for(context.job, context.queue)
    if calling is None:
        log.error(
            "no handler for job %r (queue %r)",
            context.job,
            context.queue,
            extra={"action": "no-handler", "run_id": context.run_id},
        )
        return Performed("failed", f"worker {worker_id} has no handler for job {context.job!r}")
    if context.dry_run and not registry.supports_dry_run(context.job, context.queue):
        log.info(
            "run %s of job %r is a dry run and its handler does not support dry runs: skipped",
            context.run_id,
            context.job,
            extra={"action": "dry-run-skipped", "run_id": context.run_id},
        )
        return Performed("succeeded", skipped=True)
    try:
        returned = await handlers.call(calling, context, in_thread)
    except Exception as error:
        return _raised(context, error)
    return _returned(context, returned)


def _raised(context: RunContext, error: Exception) -> Performed:
    """What a handler that raised ``error`` did."""
    if isinstance(error, Snooze):
        return _snoozed(context, error)
    if isinstance(error, NonRetryableError):
        _log_failure(context, error, "failed for good (not retryable)")
        return Performed("failed", message_of(error), retryable=False, error=error)
    _log_failure(context, error, "failed")
    return Performed("failed", message_of(error), error=error)


def _returned(context: RunContext, returned: object) -> Performed:
    """What a handler that returned ``returned`` did."""
    if isinstance(returned, Snooze):
        return _snoozed(context, returned)
    return Performed("succeeded", returned=returned)


def _completion(context: RunContext, performed: Performed) -> Completion:
    return Completion(
        context.run_id,
        context.fencing_token,
        performed.outcome,
        performed.message,
        performed.retryable,
        performed.delay_seconds,
    )


def _snoozed(context: RunContext, snooze: Snooze) -> Performed:
    log.info(
        "run %s (%s, attempt %d) snoozed for %gs",
        context.run_id,
        context.job,
        context.attempt,
        snooze.seconds,
        extra={"action": "snoozed", "run_id": context.run_id},
    )
    return Performed("snoozed", delay_seconds=snooze.seconds)


async def execute(session: Session, held: Held) -> None:
    context = held.context
    completion: Completion | None = None
    try:
        performed = await perform(
            session.handlers, context, session.threads.run, session.settings.worker_id
        )
        completion = _completion(context, performed)
    except asyncio.CancelledError:
        completion = failure(context, "worker stopped before the handler finished")
        raise
    except Exception as error:
        _log_failure(context, error, "failed")
        completion = failure(context, message_of(error))
    finally:
        completions.finish(session, held, completion)


def failure(context: RunContext, message: str, retryable: bool = True) -> Completion:
    return Completion(context.run_id, context.fencing_token, "failed", message, retryable)


def _log_failure(context: RunContext, error: BaseException, what: str) -> None:
    """One line per failed attempt: a handler that raises is the expected way to fail a
    run, and a traceback per retry would bury everything else. The traceback is there at
    DEBUG for whoever debugs the handler."""
    extra = {"action": "failed", "run_id": context.run_id}
    log.warning(
        "run %s (%s, attempt %d) %s: %s",
        context.run_id,
        context.job,
        context.attempt,
        what,
        message_of(error),
        extra=extra,
    )
    if log.isEnabledFor(logging.DEBUG):
        log.debug("run %s: the handler raised", context.run_id, exc_info=error, extra=extra)


def message_of(error: BaseException) -> str:
    """``"<ExceptionType>: <message>"``, bounded."""
    text = str(error)
    message = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return message[:MAX_MESSAGE]
