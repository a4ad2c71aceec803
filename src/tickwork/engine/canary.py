"""The canary: a synthetic run per shard every minute, enqueued by the scheduler that
owns the shard and completed by any dispatcher, so "runs start and finish" is measured
end to end on every shard, whether or not anyone's jobs are due.

Its runs belong to the reserved tenant ``tickwork-canary`` (queue ``tickwork-canary``,
priority critical, one attempt, a minute to start): one per shard and minute, kept
unique by an idempotency key, so two schedulers racing for a shard or a failover in
the middle of a minute still make one. A canary that did not succeed within a minute
of its due time is a miss; ``tickwork_canary_missed`` counts the misses in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from tickwork.core.records import NewRun, Origin, Outcome, State
from tickwork.core.spec import Priority
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.store import observe, runs
from tickwork.store.database import Connection

TENANT: Final = "tickwork-canary"
JOB: Final = "canary"
QUEUE: Final = "tickwork-canary"
# A canary that has not succeeded this long after its due time is missed.
GRACE: Final = timedelta(seconds=60)
# How many past minutes are judged for the misses-in-a-row count.
JUDGED_MINUTES: Final = 5

logger = logging.getLogger(__name__)


def minute_of(instant: datetime) -> datetime:
    return instant.replace(second=0, microsecond=0)


async def enqueue(conn: Connection, shard: int, now: datetime) -> bool:
    """This minute's canary run on the shard; True if this call made it."""
    due = minute_of(now)
    _, created = await runs.insert(
        conn,
        shard,
        NewRun(
            tenant=TENANT,
            job=JOB,
            queue=QUEUE,
            priority=Priority.critical.rank,
            origin=Origin.api,
            max_attempts=1,
            retry_base=1.0,
            retry_max=1.0,
            timeout_seconds=30,
            due_at=due,
            ready_at=due,
            # Not started within the grace: it ends skipped (a miss), not waiting forever.
            start_deadline=due + GRACE,
            idempotency_key=f"canary-{due:%Y%m%dT%H%MZ}",
        ),
        now,
    )
    return created


@dataclass(frozen=True, slots=True)
class Status:
    """``lag``: finish minus due of the latest succeeded canary judged (None: none yet);
    ``missed``: judged canaries in a row, newest first, that did not succeed in time."""

    lag: float | None
    missed: int


def judge(found: Sequence[observe.CanaryRun], now: datetime, watched_since: datetime) -> Status:
    """Judge the minutes whose grace is over, from ``watched_since`` (when this replica
    began to own the shard: earlier minutes were someone else's to enqueue) on."""
    by_due = {run.due_at: run for run in found}
    newest = minute_of(now - GRACE)
    oldest = max(minute_of(watched_since), newest - timedelta(minutes=JUDGED_MINUTES - 1))
    missed = 0
    lag = None
    minute = newest
    while minute >= oldest:
        run = by_due.get(minute)
        if run is not None and run.state is State.succeeded and run.finished_at is not None:
            taken = run.finished_at - minute
            if taken <= GRACE:
                lag = taken.total_seconds()
                break
        missed += 1
        minute -= timedelta(minutes=1)
    return Status(lag, missed)


async def status(conn: Connection, now: datetime, watched_since: datetime) -> Status:
    since = minute_of(now) - timedelta(minutes=JUDGED_MINUTES + 1)
    found = await observe.canary_runs_since(conn, TENANT, JOB, since)
    return judge(found, now, watched_since)


async def complete_ready(dispatcher: Dispatcher, worker_id: str) -> int:
    """Lease the ready canary runs (of every shard) and complete them: the dispatcher's
    half of the canary. Returns how many it completed."""
    granted = await dispatcher.lease(
        [QUEUE], limit=16, worker_id=worker_id, lease_seconds=30.0, tenant=TENANT
    )
    if not granted:
        return 0
    done = await dispatcher.complete(
        [CompleteItem(lease.run_id, lease.fencing_token, Outcome.succeeded) for lease in granted]
    )
    return sum(1 for result in done if not isinstance(result, Exception))


async def work(
    dispatcher: Dispatcher, stop: asyncio.Event, worker_id: str, interval: float = 2.0
) -> None:
    """Complete canary runs every ``interval`` seconds until ``stop``; a failed round
    (a shard down) is logged and tried again, it never ends the loop."""
    while not stop.is_set():
        try:
            await complete_ready(dispatcher, worker_id)
        except Exception as error:
            logger.warning("canary round failed: %s", error, extra={"action": "canary-failed"})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
