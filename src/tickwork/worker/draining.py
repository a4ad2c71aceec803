"""Draining: after ``stop()``, running handlers get until ``drain_timeout`` (their
leases kept alive meanwhile), then their outcomes are completed within
``COMPLETION_GRACE_SECONDS``. Handlers still running at the timeout are cancelled and
reported as failed (retryable), so their runs are retried at once instead of after
their lease."""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from tickwork.worker.session import Session

log: Final = logging.getLogger("tickwork.worker")

COMPLETION_GRACE_SECONDS: Final = 5.0
# After stop(force=True): completions already under way get this long.
ABORT_GRACE_SECONDS: Final = 0.5


async def drain(session: Session) -> None:
    if not session.tasks:
        return
    loop = session.loop
    deadline = (session.stopped_at or loop.time()) + session.settings.drain_timeout
    aborted = asyncio.create_task(session.aborting.wait())
    try:
        while session.tasks and not aborted.done():
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.wait(
                {*session.tasks, aborted}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
    finally:
        aborted.cancel()
    if session.tasks:
        log.warning(
            "drain timeout: cancelling %d handler(s)",
            session.running,
            extra={"action": "drain-timeout"},
        )
        for task in session.tasks:
            task.cancel()
        await asyncio.gather(*session.tasks, return_exceptions=True)


async def flush_completions(session: Session) -> None:
    """Wait for the completions still to be sent, up to the grace period."""
    session.check_idle()
    timeout = ABORT_GRACE_SECONDS if session.aborting.is_set() else COMPLETION_GRACE_SECONDS
    try:
        await asyncio.wait_for(session.completions_idle.wait(), timeout)
    except TimeoutError:
        log.warning(
            "%d completion(s) not delivered; their leases will expire",
            len(session.pending) + sum(h.completing for h in session.held.values()),
            extra={"action": "undelivered"},
        )
