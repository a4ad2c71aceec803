"""Running leased runs: one task per run, its handler called, its outcome turned into
a completion.

Returning from the handler is success; ``NonRetryableError`` fails the run for good;
``Snooze`` (raised or returned) puts it back for a while without using an attempt; any
other exception fails it as retryable; a handler cancelled by the drain fails it as
retryable too, so it is retried at once rather than after its lease.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Final

from tickwork.worker import completions, handlers
from tickwork.worker.client import Completion, Lease, Outcome
from tickwork.worker.context import NonRetryableError, RunContext, Snooze
from tickwork.worker.session import Held, Session

log: Final = logging.getLogger("tickwork.worker")

MAX_MESSAGE: Final = 4000


def start(session: Session, lease: Lease) -> None:
    """Hold ``lease`` and start its handler's task."""
    settings = session.settings
    context = RunContext(lease, settings.worker_id)
    held = Held(context, next_beat=session.loop.time() + settings.lease_seconds / 3)
    session.held[context.run_id] = held
    task = asyncio.create_task(execute(session, held), name=f"tickwork-run-{context.run_id}")
    session.tasks.add(task)

    def done(task: asyncio.Task[None]) -> None:
        session.tasks.discard(task)
        session.slot_freed.set()

    task.add_done_callback(done)
    session.beat_wakeup.set()
    log.debug(
        "leased %s (%s, attempt %d)",
        context.run_id,
        context.job,
        context.attempt,
        extra={"action": "leased", "run_id": context.run_id},
    )
    session.signals.leased.signal(lease)


@dataclass(frozen=True, slots=True)
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
    except Snooze as snooze:
        return _snoozed(context, snooze)
    except NonRetryableError as error:
        _log_failure(context, error, "failed for good (not retryable)")
        return Performed("failed", message_of(error), retryable=False, error=error)
    except Exception as error:
        _log_failure(context, error, "failed")
        return Performed("failed", message_of(error), error=error)
    if isinstance(returned, Snooze):
        return _snoozed(context, returned)
    return Performed("succeeded", returned=returned)


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
        completion = Completion(
            context.run_id,
            context.fencing_token,
            performed.outcome,
            performed.message,
            performed.retryable,
            performed.delay_seconds,
        )
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
