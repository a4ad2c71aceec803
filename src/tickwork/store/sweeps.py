"""The scheduler's sweeps over one shard: the reaper (expired leases back to
``retry_wait`` or ``dead``), the due flip (``scheduled``/``retry_wait`` to ``ready``)
and the starting-deadline skip.

Each sweep is one single-shard transaction, idempotent, and fenced: given the writer's
``Fence`` it first checks the shard's epoch (``epochs.check``) and writes nothing when
the writer was deposed. The scheduler orchestrates them (``engine.scheduler``); the
retry decision of a reaped lease is the core's (``core.retry``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from tickwork.core.records import State
from tickwork.store import epochs, leases, queries
from tickwork.store.database import Connection
from tickwork.store.runs import notify_ready

LOCK_EXPIRED: Final = queries.get("lock_expired")
PROMOTE_DUE: Final = queries.get("promote_due")
SKIP_PAST_DEADLINE: Final = queries.get("skip_past_deadline")
SECONDS_UNTIL_NEXT_DUE: Final = queries.get("seconds_until_next_due")

LEASE_EXPIRED_ERROR: Final = {"message": "lease expired", "reason": "lease-expired"}


@dataclass(frozen=True, slots=True)
class Reaped:
    retried: int
    dead: int
    cancelled: int
    # (tenant, job, priority rank) of each lease taken back: the per-job expiry metric.
    expired: tuple[tuple[str, str, int], ...] = field(default=(), compare=False)

    @property
    def total(self) -> int:
        return self.retried + self.dead + self.cancelled


async def reap(
    conn: Connection,
    limit: int = 1000,
    now: datetime | None = None,
    rng: random.Random | None = None,
    *,
    fence: epochs.Fence | None = None,
) -> Reaped:
    """Take back expired leases: each counts as a failed attempt (``lease-expired``)."""
    async with conn.transaction():
        await epochs.check(conn, fence)
        rows = await conn.fetch(LOCK_EXPIRED, now, limit)
        if not rows:
            return Reaped(0, 0, 0)
        failures = [
            leases.failure(
                row, dict(LEASE_EXPIRED_ERROR, attempt=row["attempt"]), True, "lease-expired", rng
            )
            for row in rows
        ]
        await leases.record_failures(conn, failures, now)
    states = [f.decision.state for f in failures]
    return Reaped(
        retried=states.count(State.retry_wait),
        dead=states.count(State.dead),
        cancelled=states.count(State.cancelled),
        expired=tuple((row["tenant"], row["job"], row["priority"]) for row in rows),
    )


@dataclass(frozen=True, slots=True)
class Promoted:
    ready: int
    skipped: int


async def promote_due(
    conn: Connection,
    limit: int = 5000,
    now: datetime | None = None,
    *,
    fence: epochs.Fence | None = None,
) -> Promoted:
    """Flip due ``scheduled``/``retry_wait`` runs to ``ready`` and wake their workers.

    First attempts past their starting deadline end ``skipped`` instead, and so do
    ready first attempts that nobody leased in time.
    """
    async with conn.transaction():
        await epochs.check(conn, fence)
        rows = await conn.fetch(PROMOTE_DUE, limit, now)
        late = await conn.fetch(SKIP_PAST_DEADLINE, limit, now)
        ready_queues = [row["queue"] for row in rows if row["state"] == State.ready.value]
        await notify_ready(conn, ready_queues)
    skipped = len(rows) - len(ready_queues) + len(late)
    return Promoted(ready=len(ready_queues), skipped=skipped)


async def seconds_until_next_due(conn: Connection, now: datetime | None = None) -> float | None:
    """Seconds until the earliest scheduled or retry-waiting run is due (None: none)."""
    seconds = await conn.fetchval(SECONDS_UNTIL_NEXT_DUE, now)
    return None if seconds is None else float(seconds)
