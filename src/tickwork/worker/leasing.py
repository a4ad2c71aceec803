"""The lease loop: one long-poll lease call at a time (``POST /v1/lease``), for as
many runs as there are free handler slots (at most ``limits.MAX_LEASE_BATCH``).

A full worker sends no lease call until a handler finishes; with fewer slots free than
a full batch it waits ``lease_window`` for more (the handlers of one batch finish
moments apart: without the window every other call asked for a handful of runs, and a
lease call costs the same for one run as for a hundred). Connection errors and
transient answers are retried after a backoff; any other error answer (a bad token, a
queue the token may not lease) ends the loop, and the worker drains and raises it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from tickwork.core import limits
from tickwork.core.backoff import Backoff
from tickwork.worker import execution
from tickwork.worker.client import ApiError, is_transient
from tickwork.worker.session import Session

log: Final = logging.getLogger("tickwork.worker")

# Between lease calls that found nothing, when the calls do not wait themselves.
IDLE_PAUSE_SECONDS: Final = 1.0


async def lease_loop(session: Session) -> ApiError | None:
    """Lease and start runs until the worker stops; the refusal that ended it, if any."""
    settings = session.settings
    backoff = Backoff(settings.retry_base_seconds, settings.retry_max_seconds, session.rng)
    full_batch = min(settings.concurrency, limits.MAX_LEASE_BATCH)
    while not session.stopping.is_set():
        free = session.free_slots
        if free <= 0:
            session.slot_freed.clear()
            await session.slot_freed.wait()
            continue
        if free < full_batch and settings.lease_window > 0:
            free = await _more_slots(session, full_batch, settings.lease_window)
            if session.stopping.is_set():
                break
        call = asyncio.create_task(
            session.client.lease(
                settings.queues,
                max_runs=min(free, limits.MAX_LEASE_BATCH),
                wait_seconds=settings.wait_seconds,
                lease_seconds=settings.lease_seconds,
                worker_id=settings.worker_id,
            )
        )
        session.lease_call = call
        try:
            leases = await call
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            break  # stop(force=True) abandoned the long-poll
        except Exception as error:
            if not is_transient(error):
                log.error(
                    "the API refused the lease call: %s",
                    error,
                    extra={"action": "lease-refused"},
                )
                if isinstance(error, ApiError):
                    return error
                raise
            await session.pause(session.retry_delay(backoff, "lease", error))
            continue
        finally:
            session.lease_call = None
        backoff.reset()
        execution.start_all(session, leases)
        if not leases and settings.wait_seconds == 0:
            await session.pause(IDLE_PAUSE_SECONDS)
    return None


async def _more_slots(session: Session, wanted: int, seconds: float) -> int:
    """The free slots once ``wanted`` are free, or after ``seconds`` (or a stop)."""
    deadline = session.loop.time() + seconds
    free = session.free_slots
    while free < wanted and not session.stopping.is_set():
        session.slot_freed.clear()
        try:
            async with asyncio.timeout_at(deadline):
                await session.slot_freed.wait()
        except TimeoutError:
            return session.free_slots
        free = session.free_slots
    return free
