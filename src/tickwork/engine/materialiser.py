"""From definitions to runs: which fire times a due definition turns into runs now.

Pure planning (``plan``) is separate from the single-shard transaction that applies it
(``materialise``). Runs are inserted up to ``lookahead`` ahead of their nominal time
(state ``scheduled``) so the due flip, not the materialiser, decides timeliness; each
insert is harmless to repeat (unique ``(tenant, job, due_at)``).

Missed fire times (scheduler down, job paused then resumed, a definition whose first
time is already past) follow ``missedRunPolicy``: ``run_once`` keeps the latest,
``run_all`` keeps the latest ``run_all_cap`` and reports how many it dropped, ``skip``
keeps none. A fire time is missed when it is more than ``grace`` in the past.

Fire times follow the job's ``schedule.dst`` policy (DST nights), read from the spec
with the rest of its schedule.

A run of a job whose ``overlapPolicy`` is Forbid or Replace carries it and is inserted
``scheduled`` even when its time has come (a catch-up): the due flip, not this
transaction, decides whether it starts, under a lock per job (``store.sweeps``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Final

import asyncpg

from tickwork.core import hashing, limits
from tickwork.core.cron import CronSchedule, DstPolicy, DstRepeated, DstSkipped
from tickwork.core.records import Origin
from tickwork.core.spec import MissedRunPolicy, OverlapPolicy
from tickwork.store import clock, epochs, queries
from tickwork.store.database import Connection
from tickwork.store.runs import notify_ready

LOCK_DUE_DEFINITIONS: Final = queries.get("lock_due_definitions")
INSERT_PLANNED_RUNS: Final = queries.get("insert_planned_runs")
ADVANCE_DEFINITIONS: Final = queries.get("advance_definitions")

DEFAULT_LOOKAHEAD: Final = timedelta(seconds=60)
DEFAULT_GRACE: Final = timedelta(seconds=10)
RUN_ALL_CAP: Final = limits.MAX_RUN_ALL_CATCH_UP
# Counting dropped fire times of a very long outage stops here (reported as at least).
_COUNT_LIMIT: Final = 10_000


_HOUR_FIELD_RULE: Final = DstPolicy()


@lru_cache(maxsize=4096)
def compiled(expression: str, zone: str, dst: DstPolicy = _HOUR_FIELD_RULE) -> CronSchedule:
    """Parsed schedules, shared: a million definitions use far fewer distinct ones."""
    return CronSchedule.parse(expression, zone, dst)


@lru_cache(maxsize=4096)
def fire_times(
    expression: str,
    zone: str,
    after: datetime,
    horizon: datetime,
    dst: DstPolicy = _HOUR_FIELD_RULE,
) -> tuple[tuple[datetime, ...], datetime | None]:
    """The fire times in ``(after, horizon]`` and the first one after ``horizon``, from
    one walk of the schedule. Shared too: the definitions of one expression due at one
    time (a fleet on ``0 * * * *``) cost one computation per pass, not one each."""
    times: list[datetime] = []
    for instant in compiled(expression, zone, dst).iter_after(after):
        if instant > horizon:
            return tuple(times), instant
        times.append(instant)
    return tuple(times), None


def idempotency_key(tenant: str, name: str, due_at: datetime, zone: str) -> str:
    """``{tenant}/{name}@{dueAt in the job's zone, ISO-8601 with offset}``."""
    local = due_at.astimezone(compiled("* * * * *", zone).tzinfo)
    return f"{tenant}/{name}@{local.isoformat()}"


@dataclass(frozen=True, slots=True)
class Due:
    """A due definition, as the materialiser reads it."""

    tenant: str
    name: str
    next_due_at: datetime
    cron: str | None
    time_zone: str
    jitter_seconds: int
    missed_run_policy: MissedRunPolicy
    starting_deadline_seconds: int | None
    overlap_policy: OverlapPolicy = OverlapPolicy.Allow
    dst: DstPolicy = _HOUR_FIELD_RULE

    @classmethod
    def from_record(cls, row: asyncpg.Record) -> Due:
        return cls(
            tenant=row["tenant"],
            name=row["name"],
            next_due_at=row["next_due_at"],
            cron=None if row["one_off"] else row["cron"],
            time_zone=row["time_zone"] or "UTC",
            jitter_seconds=row["jitter_seconds"] or 0,
            missed_run_policy=MissedRunPolicy(row["missed_run_policy"] or "run_once"),
            starting_deadline_seconds=row["starting_deadline_seconds"],
            overlap_policy=OverlapPolicy(row["overlap_policy"] or OverlapPolicy.Allow),
            dst=DstPolicy(
                DstRepeated(row["dst_repeated"]) if row["dst_repeated"] else None,
                DstSkipped(row["dst_skipped"]) if row["dst_skipped"] else None,
            ),
        )

    @property
    def overlap(self) -> str | None:
        """What the job's runs carry: the policy the due flip applies, None for Allow."""
        return None if self.overlap_policy is OverlapPolicy.Allow else self.overlap_policy.value


@dataclass(frozen=True, slots=True)
class Plan:
    due_times: tuple[datetime, ...]  # nominal times to insert runs for, ascending
    next_due_at: datetime | None  # the next fire time after the horizon
    dropped: int | None  # run_all: missed times over the cap (None: no catch-up now)
    caught_up: int = 0  # missed fire times inserted as catch-up runs


def latest_before(
    schedule: CronSchedule,
    after: datetime,
    until: datetime,
    count: int,
    *,
    count_all: bool = True,
) -> tuple[list[datetime], int]:
    """The last ``count`` fire times in ``(after, until]``, and how many there are in all
    (saturating at ``_COUNT_LIMIT``), without walking a long outage minute by minute.

    Without ``count_all`` the total only counts the last window searched: counting a
    week-long outage of a minutely job costs seconds, and ``run_once`` needs no total.
    """
    window = timedelta(hours=1)
    while True:
        start = max(after, until - window)
        times = schedule.between(start, until)
        if len(times) >= count or start == after:
            break
        window *= 8
    total = len(times)
    if count_all and start > after:  # count what lies before the window, up to the limit
        for instant in schedule.iter_after(after):
            if instant > start or total >= _COUNT_LIMIT:
                break
            total += 1
    return times[len(times) - count :], total


def plan(
    due: Due,
    now: datetime,
    lookahead: timedelta = DEFAULT_LOOKAHEAD,
    grace: timedelta = DEFAULT_GRACE,
    run_all_cap: int = RUN_ALL_CAP,
) -> Plan:
    """The nominal times to insert now for ``due``, and its next due time."""
    horizon = now + lookahead
    if due.cron is None:  # one-off runAt: once, however late
        return Plan((due.next_due_at,), None, None)
    schedule = compiled(due.cron, due.time_zone, due.dst)
    first = due.next_due_at  # always a fire time of the schedule
    cutoff = now - grace
    if first > cutoff:
        upcoming, next_due = fire_times(due.cron, due.time_zone, first, horizon, due.dst)
        return Plan((first, *upcoming), next_due, None)
    policy = due.missed_run_policy
    dropped: int | None = None
    if policy is MissedRunPolicy.skip:
        missed: list[datetime] = []
    elif policy is MissedRunPolicy.run_once:
        latest = latest_before(schedule, first, cutoff, 1, count_all=False)[0]
        missed = [first, *latest][-1:]
    else:
        kept, later = latest_before(schedule, first, cutoff, run_all_cap)
        missed = [first, *kept][-run_all_cap:]
        dropped = later + 1 - len(missed)
    upcoming, next_due = fire_times(due.cron, due.time_zone, cutoff, horizon, due.dst)
    return Plan((*missed, *upcoming), next_due, dropped, len(missed))


@dataclass(frozen=True, slots=True)
class Materialised:
    definitions: int
    runs: int
    ready: int


async def materialise(
    conn: Connection,
    now: datetime | None = None,
    batch: int = 1000,
    lookahead: timedelta = DEFAULT_LOOKAHEAD,
    grace: timedelta = DEFAULT_GRACE,
    *,
    fence: epochs.Fence | None = None,
) -> Materialised:
    """One batch: lock due definitions, insert their runs, advance ``next_due_at``;
    nothing when ``fence`` is no longer the shard's epoch (``epochs.Deposed``)."""
    async with conn.transaction():
        await epochs.check(conn, fence)
        instant = await clock.now(conn, now)
        rows = await conn.fetch(LOCK_DUE_DEFINITIONS, instant + lookahead, batch)
        if not rows:
            return Materialised(0, 0, 0)
        # Rows first, columns (the arrays the unnest takes) at the end: appending 18
        # values one by one per run cost more than planning it.
        planned_runs: list[tuple[object, ...]] = []
        advanced: list[tuple[object, ...]] = []
        for row in rows:
            due = Due.from_record(row)
            planned = plan(due, instant, lookahead, grace)
            origin = Origin.cron if due.cron is not None else Origin.once
            seconds = due.starting_deadline_seconds
            deadline = None if seconds is None else timedelta(seconds=seconds)
            offset = timedelta(
                seconds=hashing.jitter_offset(due.tenant, due.name, due.jitter_seconds)
            )
            for due_at in planned.due_times:
                ready_at = due_at + offset if origin is Origin.cron else due_at
                planned_runs.append(
                    (
                        due.tenant,
                        due.name,
                        row["queue"],
                        row["priority"],
                        origin.value,
                        row["max_attempts"],
                        row["retry_base"],
                        row["retry_max"],
                        row["timeout_seconds"],
                        due_at,
                        ready_at,
                        # From the jittered ready time: the offset must not eat the
                        # deadline (a 45 s offset would skip every run of a 30 s one).
                        None if deadline is None else ready_at + deadline,
                        idempotency_key(due.tenant, due.name, due_at, due.time_zone),
                        row["payload"],
                        len(planned_runs),
                        row["concurrency"],
                        row["dry_run"],
                        due.overlap,
                    )
                )
            advanced.append(
                (due.tenant, due.name, planned.next_due_at, planned.dropped, planned.caught_up)
            )
        columns = _columns(planned_runs, 18)
        inserted: Sequence[asyncpg.Record] = await conn.fetch(
            INSERT_PLANNED_RUNS, *columns[:17], now, columns[17]
        )
        await conn.execute(ADVANCE_DEFINITIONS, *_columns(advanced, 5))
        ready = [r["queue"] for r in inserted if r["state"] == "ready"]
        await notify_ready(conn, ready)
    return Materialised(len(rows), len(inserted), len(ready))


def _columns(rows: Sequence[tuple[object, ...]], width: int) -> list[list[object]]:
    """Rows of ``width`` values as ``width`` parallel arrays, for ``unnest``."""
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows, strict=True)]


async def materialise_all(
    conn: Connection,
    now: datetime | None = None,
    batch: int = 1000,
    lookahead: timedelta = DEFAULT_LOOKAHEAD,
    max_batches: int = 1000,
    *,
    fence: epochs.Fence | None = None,
    before_batch: Callable[[], None] | None = None,
) -> Materialised:
    """Batches until no definition is due (or ``max_batches``); one transaction each.
    ``before_batch`` runs before each (the scheduler's check that it still owns the
    shard: it raises to stop)."""
    total = Materialised(0, 0, 0)
    for _ in range(max_batches):
        if before_batch is not None:
            before_batch()
        done = await materialise(conn, now, batch, lookahead, fence=fence)
        total = Materialised(
            total.definitions + done.definitions, total.runs + done.runs, total.ready + done.ready
        )
        if done.definitions < batch:
            break
    return total
