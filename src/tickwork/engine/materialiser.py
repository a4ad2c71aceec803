"""From definitions to runs: which fire times a due definition turns into runs now.

Pure planning (``plan``, and ``decide`` for a batch) is separate from the single-shard
transaction that applies it, which is the store's (``store.materialise``): the engine
says which runs to make, the store how they are written. Runs are inserted up to
``lookahead`` ahead of their nominal time (state ``scheduled``) so the due flip, not
the materialiser, decides timeliness; each insert is harmless to repeat (unique
``(tenant, job, due_at)``).

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
from functools import lru_cache, partial
from typing import Final

from tickwork.core import hashing, limits
from tickwork.core.cron import CronSchedule, DstPolicy, DstRepeated, DstSkipped
from tickwork.core.records import Origin
from tickwork.core.spec import MissedRunPolicy, OverlapPolicy
from tickwork.store import epochs
from tickwork.store import materialise as store
from tickwork.store.database import Connection

# The batch's result is the store's; named here too for the callers of ``materialise``.
Materialised = store.Materialised
# Still run by the backfill in its own transaction, and named by bench's EXPLAIN of a
# batch and a migration test: they have not moved onto ``store.materialise.insert_runs``.
INSERT_PLANNED_RUNS: Final = store.INSERT_PLANNED_RUNS

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
    def from_record(cls, definition: store.DueDefinition) -> Due:
        """What the stored spec says, with the spec's defaults for what it leaves out."""
        d = definition
        return cls(
            tenant=d.tenant,
            name=d.name,
            next_due_at=d.next_due_at,
            cron=None if d.one_off else d.cron,
            time_zone=d.time_zone or "UTC",
            jitter_seconds=d.jitter_seconds or 0,
            missed_run_policy=MissedRunPolicy(d.missed_run_policy or "run_once"),
            starting_deadline_seconds=d.starting_deadline_seconds,
            overlap_policy=OverlapPolicy(d.overlap_policy or OverlapPolicy.Allow),
            dst=DstPolicy(
                DstRepeated(d.dst_repeated) if d.dst_repeated else None,
                DstSkipped(d.dst_skipped) if d.dst_skipped else None,
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
    nothing when ``fence`` is no longer the shard's epoch (``epochs.Deposed``). The
    transaction is the store's; what it writes is ``decide``'s."""
    return await store.materialise(
        conn, partial(decide, lookahead=lookahead, grace=grace), now, lookahead, batch, fence=fence
    )


def decide(
    definitions: Sequence[store.DueDefinition],
    instant: datetime,
    lookahead: timedelta = DEFAULT_LOOKAHEAD,
    grace: timedelta = DEFAULT_GRACE,
) -> tuple[list[store.PlannedRun], list[store.Advance]]:
    """The runs to insert for due ``definitions`` at ``instant`` (the database's time),
    and where each definition's next fire time moves."""
    planned_runs: list[store.PlannedRun] = []
    advances: list[store.Advance] = []
    for definition in definitions:
        due = Due.from_record(definition)
        planned = plan(due, instant, lookahead, grace)
        origin = Origin.cron if due.cron is not None else Origin.once
        seconds = due.starting_deadline_seconds
        deadline = None if seconds is None else timedelta(seconds=seconds)
        offset = timedelta(seconds=hashing.jitter_offset(due.tenant, due.name, due.jitter_seconds))
        for due_at in planned.due_times:
            ready_at = due_at + offset if origin is Origin.cron else due_at
            planned_runs.append(
                store.PlannedRun(
                    tenant=due.tenant,
                    job=due.name,
                    queue=definition.queue,
                    priority=definition.priority,
                    origin=origin,
                    max_attempts=definition.max_attempts,
                    retry_base=definition.retry_base,
                    retry_max=definition.retry_max,
                    timeout_seconds=definition.timeout_seconds,
                    due_at=due_at,
                    ready_at=ready_at,
                    # From the jittered ready time: the offset must not eat the deadline
                    # (a 45 s offset would skip every run of a 30 s one).
                    start_deadline=None if deadline is None else ready_at + deadline,
                    idempotency_key=idempotency_key(due.tenant, due.name, due_at, due.time_zone),
                    payload=definition.payload,
                    concurrency=definition.concurrency,
                    dry_run=definition.dry_run,
                    overlap=due.overlap,
                )
            )
        advances.append(
            store.Advance(
                due.tenant, due.name, planned.next_due_at, planned.dropped, planned.caught_up
            )
        )
    return planned_runs, advances


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
