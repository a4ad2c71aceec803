"""The materialiser's transaction over one shard: lock the due definitions, insert the
runs planned for them, advance their ``next_due_at``, wake the workers of what is ready.

What to materialise is the engine's decision (``engine.materialiser``): the transaction
hands the definitions it locked (``DueDefinition``) to the caller's ``decide`` and
writes what comes back. Runs and advances travel as typed rows (``PlannedRun``,
``Advance``) and become the parallel arrays that ``insert_planned_runs`` and
``advance_definitions`` unnest here only, so the column order each statement expects is
written once, next to its SQL.

Fenced like the sweeps: given the writer's ``Fence`` it first checks the shard's epoch
(``epochs.check``) and writes nothing when the writer was deposed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Final

import asyncpg

from tickwork.core.records import Origin
from tickwork.store import clock, epochs, queries
from tickwork.store.database import Connection
from tickwork.store.runs import notify_ready


class SQL(queries.Statements):
    lock_due_definitions: str
    insert_planned_runs: str
    advance_definitions: str
    fire_times_taken: str


# The engine's materialiser hands this statement on by this name.
INSERT_PLANNED_RUNS: Final = SQL.insert_planned_runs


@dataclass(frozen=True, slots=True)
class DueDefinition:
    """A definition whose next fire time falls before the horizon, locked for the
    batch: the columns of ``lock_due_definitions``, in its order (``_due_definitions``
    checks it)."""

    tenant: str
    name: str
    next_due_at: datetime
    queue: str
    priority: int
    cron: str | None
    time_zone: str | None
    jitter_seconds: int | None
    missed_run_policy: str | None
    dst_repeated: str | None  # None: no choice made, the hour field's rule
    dst_skipped: str | None
    starting_deadline_seconds: int | None
    one_off: bool  # a runAt job: one run, however late
    max_attempts: int | None
    retry_base: float | None
    retry_max: float | None
    timeout_seconds: int | None
    concurrency: int  # > 0: the run is under flow control
    dry_run: bool
    payload: str | None  # JSON text, as stored
    overlap_policy: str | None


_DUE_COLUMNS: Final = tuple(f.name for f in fields(DueDefinition))


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """A run to insert (``insert_planned_runs``); its key ``(tenant, job, due_at)`` for
    a cron run, or its idempotency key, makes a repeat insert nothing."""

    tenant: str
    job: str
    queue: str
    priority: int
    origin: Origin
    max_attempts: int | None
    retry_base: float | None
    retry_max: float | None
    timeout_seconds: int | None
    due_at: datetime
    ready_at: datetime
    start_deadline: datetime | None
    idempotency_key: str | None
    payload: str | None  # JSON text
    concurrency: int
    dry_run: bool
    overlap: str | None  # the policy the due flip applies; None: Allow


@dataclass(frozen=True, slots=True)
class Advance:
    """A definition's cursor moved past what was materialised (``advance_definitions``)."""

    tenant: str
    name: str
    next_due_at: datetime | None  # None: no fire time left (a runAt job's, once made)
    dropped: int | None  # fire times a run_all catch-up dropped; None: keep the last report
    caught_up: int  # missed fire times caught up now


@dataclass(frozen=True, slots=True)
class Materialised:
    definitions: int
    runs: int
    ready: int


# The engine's decision for a batch: the definitions locked and the database's instant
# in, the runs to insert and every definition's advance out.
Decide = Callable[
    [Sequence[DueDefinition], datetime], tuple[Sequence[PlannedRun], Sequence[Advance]]
]


async def materialise(
    conn: Connection,
    decide: Decide,
    now: datetime | None,
    lookahead: timedelta,
    batch: int,
    *,
    fence: epochs.Fence | None = None,
) -> Materialised:
    """One batch in one transaction: up to ``batch`` definitions due before
    ``now + lookahead`` locked, ``decide``'s runs inserted and advances applied, the
    workers of ready runs woken; nothing when ``fence`` is no longer the shard's epoch
    (``epochs.Deposed``)."""
    async with conn.transaction():
        await epochs.check(conn, fence)
        instant = await clock.now(conn, now)
        rows = await conn.fetch(SQL.lock_due_definitions, instant + lookahead, batch)
        if not rows:
            return Materialised(0, 0, 0)
        planned, advances = decide(_due_definitions(rows), instant)
        inserted = await insert_runs(conn, planned, now)
        await advance(conn, advances)
        ready = [row["queue"] for row in inserted if row["state"] == "ready"]
        await notify_ready(conn, ready)
    return Materialised(len(rows), len(inserted), len(ready))


def _due_definitions(rows: Sequence[asyncpg.Record]) -> list[DueDefinition]:
    """The rows of ``lock_due_definitions``, by position: naming each of 21 columns cost
    as much as planning the run. The names are compared once a batch instead, so a column
    added or moved in the statement stops the batch rather than shift a value."""
    if tuple(rows[0].keys()) != _DUE_COLUMNS:
        raise RuntimeError(
            f"lock_due_definitions returns {tuple(rows[0].keys())}, DueDefinition "
            f"takes {_DUE_COLUMNS}: they must name the same columns in the same order"
        )
    return [DueDefinition(*row) for row in rows]


async def insert_runs(
    conn: Connection, runs: Sequence[PlannedRun], now: datetime | None
) -> list[asyncpg.Record]:
    """Insert ``runs`` in order (in the caller's transaction), leaving out each whose key
    is taken, and mark their jobs changed. Returns ``(queue, state)`` of each run
    inserted: ``scheduled``, ``ready``, or ``skipped`` (past its starting deadline)."""
    rows: list[asyncpg.Record] = await conn.fetch(
        SQL.insert_planned_runs,
        [r.tenant for r in runs],  # $1
        [r.job for r in runs],
        [r.queue for r in runs],
        [r.priority for r in runs],
        [r.origin.value for r in runs],  # $5
        [r.max_attempts for r in runs],
        [r.retry_base for r in runs],
        [r.retry_max for r in runs],
        [r.timeout_seconds for r in runs],
        [r.due_at for r in runs],  # $10
        [r.ready_at for r in runs],
        [r.start_deadline for r in runs],
        [r.idempotency_key for r in runs],
        [r.payload for r in runs],
        list(range(len(runs))),  # $15: the ordinal, which orders inserts and key claims
        [r.concurrency for r in runs],
        [r.dry_run for r in runs],
        now,  # $18
        [r.overlap for r in runs],
    )
    return rows


async def advance(conn: Connection, advances: Sequence[Advance]) -> None:
    """Move the definitions' cursors and mark their jobs changed (in the caller's
    transaction)."""
    await conn.execute(
        SQL.advance_definitions,
        [a.tenant for a in advances],  # $1
        [a.name for a in advances],
        [a.next_due_at for a in advances],
        [a.dropped for a in advances],
        [a.caught_up for a in advances],  # $5
    )


async def fire_times_taken(
    conn: Connection, tenant: str, job: str, due_times: Sequence[datetime]
) -> int:
    """How many of ``due_times`` of the job have a run already (their keys are taken)."""
    if not due_times:
        return 0
    return int(await conn.fetchval(SQL.fire_times_taken, tenant, job, list(due_times)))
