"""Heartbeats: every held run's lease extended at a third of its length, in batches
(``POST /v1/runs:heartbeat``).

Runs due within a third of the interval are beaten together, one call for many runs.
The answers pass ``cancelRequested`` and lost leases on to the handlers' contexts. A
failed call is tried again after a backoff no longer than the interval, so a short
outage does not cost the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from tickwork.core import limits
from tickwork.core.backoff import Backoff
from tickwork.worker.client import Beat, Problem, is_transient
from tickwork.worker.results import report
from tickwork.worker.session import Held, Session

log: Final = logging.getLogger("tickwork.worker")


async def heartbeat_loop(session: Session) -> None:
    settings = session.settings
    interval = settings.lease_seconds / 3
    # Runs due within `slack` are beaten together: one call for many runs.
    slack = interval / 3
    backoff = Backoff(
        settings.retry_base_seconds, min(settings.retry_max_seconds, interval), session.rng
    )
    while True:
        session.beat_wakeup.clear()
        now = session.loop.time()
        waiting = [h for h in session.held.values() if not h.completing]
        due = [h for h in waiting if h.next_beat <= now + slack]
        if due:
            step = limits.MAX_HEARTBEAT_BATCH
            for start in range(0, len(due), step):
                await _beat(session, due[start : start + step], interval, backoff)
            continue
        timeout = None
        if waiting:
            timeout = max(0.0, min(h.next_beat for h in waiting) - slack - now)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.beat_wakeup.wait(), timeout)


async def _beat(session: Session, held: list[Held], interval: float, backoff: Backoff) -> None:
    loop = session.loop
    sent_at = loop.time()
    extend = session.settings.lease_seconds
    beats = [Beat(h.context.run_id, h.context.fencing_token, extend) for h in held]
    try:
        answers = await session.client.heartbeat_many(beats)
    except Exception as error:
        if is_transient(error):
            delay = session.retry_delay(backoff, "heartbeat", error)
        else:
            log.error(
                "the API refused a heartbeat: %s", error, extra={"action": "heartbeat-refused"}
            )
            delay = interval
        for h in held:
            h.next_beat = loop.time() + delay
        return
    unavailable = [a for a in answers if isinstance(a, Problem) and a.transient]
    if unavailable:  # some runs' shard was down: beat those again soon, not at interval
        again_at = loop.time() + session.retry_delay(backoff, "heartbeat", unavailable[0].detail)
    else:
        backoff.reset()
    for h, answer in zip(held, answers, strict=True):
        context = h.context
        if session.held.get(context.run_id) is not h or h.completing:
            continue  # completed meanwhile: the completion's answer decides
        if isinstance(answer, Problem):
            if answer.transient:
                h.next_beat = again_at
            elif answer.lease_lost:
                log.warning(
                    "run %s: lease lost (%s)",
                    context.run_id,
                    answer.detail,
                    extra={"action": "lease-lost", "run_id": context.run_id},
                )
                context._lose()
                del session.held[context.run_id]
                if h in session.pending:  # finished, completion not sent yet
                    session.pending.remove(h)
                    report(session.on_result, h.context, h.completion, dropped=True)
                session.signals.lease_lost.signal(context.run_id)
            else:
                log.error(
                    "heartbeat of %s refused: %s",
                    context.run_id,
                    answer.detail,
                    extra={"action": "heartbeat-refused", "run_id": context.run_id},
                )
                h.next_beat = loop.time() + interval
            continue
        h.next_beat = sent_at + interval
        context.lease_expires_at = answer.lease_expires_at
        if answer.cancel_requested and not context.cancel_requested:
            log.info(
                "run %s: cancel requested",
                context.run_id,
                extra={"action": "cancel-requested", "run_id": context.run_id},
            )
            context._request_cancel()
        session.signals.extended.signal(answer)
    session.check_idle()
