"""Completions: finished runs reported in batches (``POST /v1/runs:complete``).

A finished run waits ``complete_window`` for others to share its call, up to
``limits.MAX_COMPLETE_BATCH`` per call. A call that gets no answer, or a transient
error (5xx, 429, 408), is repeated as it was after a backoff: the API answers a
repeated completion as it did the first. The run stays held (and heartbeaten) until
its completion is answered.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from tickwork.core import limits
from tickwork.core.backoff import Backoff
from tickwork.worker.client import ApiError, Completed, Completion, Problem, is_transient
from tickwork.worker.results import report
from tickwork.worker.session import Held, Session

log: Final = logging.getLogger("tickwork.worker")


def finish(session: Session, held: Held, completion: Completion | None) -> None:
    """A run's handler is done: queue its completion, or drop it when the lease is gone."""
    context = held.context
    if completion is None or context.lost or session.held.get(context.run_id) is not held:
        session.held.pop(context.run_id, None)
        report(session.on_result, held.context, completion, dropped=True)
        return
    held.completion = completion
    session.pending.append(held)
    session.completions_idle.clear()
    session.complete_wakeup.set()


async def complete_loop(session: Session) -> None:
    settings = session.settings
    backoff = Backoff(settings.retry_base_seconds, settings.retry_max_seconds, session.rng)
    while True:
        await session.complete_wakeup.wait()
        if settings.complete_window > 0:
            await asyncio.sleep(settings.complete_window)  # let runs finishing together join
        session.complete_wakeup.clear()
        while session.pending:
            batch = session.pending[: limits.MAX_COMPLETE_BATCH]
            del session.pending[: limits.MAX_COMPLETE_BATCH]
            for h in batch:
                h.completing = True
            try:
                answers = await session.client.complete_many([_completion_of(h) for h in batch])
            except Exception as error:
                for h in batch:
                    h.completing = False
                session.beat_wakeup.set()
                if is_transient(error):
                    session.pending[:0] = batch
                    delay = session.retry_delay(backoff, "complete", error)
                    if session.aborting.is_set():
                        break
                    await asyncio.sleep(delay)
                    continue
                log.error(
                    "the API refused %d completion(s): %s",
                    len(batch),
                    error,
                    extra={"action": "complete-refused"},
                )
                problem = error.problem if isinstance(error, ApiError) else None
                for h in batch:
                    session.held.pop(h.context.run_id, None)
                    report(session.on_result, h.context, h.completion, problem=problem)
                continue
            again = [
                h
                for h, answer in zip(batch, answers, strict=True)
                if not _settle(session, h, answer)
            ]
            if not again:
                backoff.reset()
                continue
            # Items whose shard was down: the rest of the batch went through.
            for h in again:
                h.completing = False
            session.pending[:0] = again
            session.beat_wakeup.set()
            delay = session.retry_delay(backoff, "complete", _first_problem(answers).detail)
            if session.aborting.is_set():
                break
            await asyncio.sleep(delay)
        session.check_idle()


def _first_problem(answers: list[Completed | Problem]) -> Problem:
    return next(a for a in answers if isinstance(a, Problem) and a.transient)


def _settle(session: Session, held: Held, answer: Completed | Problem) -> bool:
    """Settle one run by the API's answer; False when the answer says to repeat it
    later (its shard was unavailable)."""
    context = held.context
    if isinstance(answer, Problem) and answer.transient:
        return False
    session.held.pop(context.run_id, None)
    session.signals.completed.signal(answer)
    if isinstance(answer, Problem):
        if answer.lease_lost:
            context._lose()
            log.warning(
                "completion of %s refused: lease lost (%s)",
                context.run_id,
                answer.detail,
                extra={"action": "dropped", "run_id": context.run_id},
            )
        else:
            log.error(
                "completion of %s refused: %s",
                context.run_id,
                answer.detail,
                extra={"action": "complete-refused", "run_id": context.run_id},
            )
        report(session.on_result, held.context, held.completion, problem=answer)
        return True
    log.debug(
        "run %s %s",
        context.run_id,
        answer.state,
        extra={"action": answer.state, "run_id": context.run_id},
    )
    report(session.on_result, held.context, held.completion, state=answer.state)
    return True


def _completion_of(held: Held) -> Completion:
    assert held.completion is not None, "only finished runs wait for completion"
    return held.completion
