"""The materialiser end to end: cron definitions in, runs out, on a real PostgreSQL.

Time is the injected ``FrozenClock``. The DST walks step the clock a minute at a time
through a whole local day with a daylight-saving change and run a scheduler pass at
every step; the runs they find are compared with fire times computed here
independently (a minute-by-minute walk of UTC with ``zoneinfo`` applying the rules of
the semantics), not with ``CronSchedule``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from cron_reference import field_values
from pydantic import ValidationError

from tickwork.api import render
from tickwork.core import hashing, zones
from tickwork.core.clock import FrozenClock
from tickwork.core.spec import JobSpec, MissedRunPolicy, Schedule
from tickwork.engine import manifests, materialiser
from tickwork.engine.jobs import Jobs, next_due_after
from tickwork.engine.scheduler import Scheduler
from tickwork.store import definitions, leases
from tickwork.store import materialise as store_materialise
from tickwork.store.database import Connection, Database

TENANT = "acme"
ACTOR = "alice@example.com"
MINUTE = timedelta(minutes=1)
LOOKAHEAD = materialiser.DEFAULT_LOOKAHEAD


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def cron_spec(
    cron: str,
    zone: str = "UTC",
    *,
    jitter: int = 0,
    policy: MissedRunPolicy = MissedRunPolicy.run_once,
    deadline: int | None = None,
    queue: str = "default",
) -> JobSpec:
    return JobSpec(
        schedule=Schedule(
            cron=cron,
            time_zone=zone,
            jitter_seconds=jitter,
            missed_run_policy=policy,
            starting_deadline_seconds=deadline,
        ),
        queue=queue,
    )


@dataclass(frozen=True)
class RunRow:
    job: str
    due_at: datetime
    ready_at: datetime
    state: str
    origin: str
    idempotency_key: str
    updated_at: datetime
    start_deadline: datetime | None


async def runs_of(database: Database, tenant: str = TENANT, job: str | None = None) -> list[RunRow]:
    """The tenant's runs on every shard, in insertion order per job."""
    found: list[RunRow] = []
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            rows = await conn.fetch(
                """SELECT job, due_at, ready_at, state, origin, idempotency_key, updated_at,
                          start_deadline
                   FROM runs WHERE tenant = $1 AND ($2::text IS NULL OR job = $2)
                   ORDER BY id""",
                tenant,
                job,
            )
        found += [RunRow(**dict(row)) for row in rows]
    return found


def due_times(runs: Sequence[RunRow], job: str | None = None) -> list[datetime]:
    return sorted(r.due_at for r in runs if job is None or r.job == job)


async def next_due_of(jobs: Jobs, name: str, tenant: str = TENANT) -> datetime | None:
    return (await jobs.get(tenant, name)).definition.next_due_at


async def walk(scheduler: Scheduler, clock: FrozenClock, until: datetime, step: float) -> None:
    """A scheduler pass at every step from now (exclusive) to ``until`` (inclusive)."""
    while clock.now() + timedelta(seconds=step) <= until:
        clock.advance(step)
        await scheduler.pass_once()
    if clock.now() < until:
        clock.set(until)
        await scheduler.pass_once()


# --- an independent model of the DST rules --------------------------------------------


def brute_force(expression: str, zone: str, after: datetime, until: datetime) -> list[datetime]:
    """Fire instants in ``(after, until]`` by looking at every UTC minute.

    Only the minute and hour fields may be restricted. Wildcard-hour schedules fire at
    every instant whose wall time matches (gap times never show, repeated ones show
    twice). Fixed-hour schedules fire at the first occurrence of a matching wall time,
    and once at the end of a gap that swallowed matching wall times.
    """
    minute_text, hour_text, *days = expression.split()
    assert days == ["*", "*", "*"], "the model only knows minute and hour fields"
    minutes = field_values(minute_text, 0, 59)
    hours = field_values(hour_text, 0, 23)
    fixed = not hour_text.startswith("*")
    tz = zones.get(zone)
    fires: list[datetime] = []
    instant = after.replace(second=0, microsecond=0) + MINUTE
    while instant <= until:
        local = instant.astimezone(tz)
        fire = local.minute in minutes and local.hour in hours
        if fixed:
            fire = fire and local.fold == 0  # a repeated wall time: its first occurrence
            before = (instant - MINUTE).astimezone(tz)
            jump = local.utcoffset() - before.utcoffset()  # type: ignore[operator]
            wall = before.replace(tzinfo=None) + MINUTE
            while jump > timedelta(0) and wall < local.replace(tzinfo=None):
                fire = fire or (wall.minute in minutes and wall.hour in hours)
                wall += MINUTE
        if fire:
            fires.append(instant)
        instant += MINUTE
    return fires


def expected_key(tenant: str, name: str, due_at: datetime, zone: str) -> str:
    return f"{tenant}/{name}@{due_at.astimezone(zones.get(zone)).isoformat()}"


def test_the_model_agrees_with_the_semantics_examples() -> None:
    """The reference model itself, on the examples the semantics and docs give."""
    day = (utc("2024-03-30T23:00:00Z"), utc("2024-03-31T22:00:00Z"))
    assert brute_force("30 2 * * *", "Europe/Berlin", *day) == [utc("2024-03-31T01:00:00Z")]
    assert brute_force("0,30 2 * * *", "Europe/Berlin", *day) == [utc("2024-03-31T01:00:00Z")]
    assert brute_force("0 2,3 * * *", "Europe/Berlin", *day) == [utc("2024-03-31T01:00:00Z")]
    night = brute_force("*/30 * * * *", "Europe/Berlin", day[0], utc("2024-03-31T02:00:00Z"))
    assert night[-4:] == [
        utc(f"2024-03-31T0{h}Z") for h in ("0:30:00", "1:00:00", "1:30:00", "2:00:00")
    ]
    # 02:00 CEST, 02:00 CET, 03:00 CET
    fall = (utc("2024-10-26T23:30:00Z"), utc("2024-10-27T02:30:00Z"))
    assert brute_force("0 * * * *", "Europe/Berlin", *fall) == [
        utc(f"2024-10-27T0{h}:00:00Z") for h in range(3)
    ]
    ny = (utc("2024-11-03T04:00:00Z"), utc("2024-11-03T08:00:00Z"))
    assert brute_force("30 1 * * *", "America/New_York", *ny) == [utc("2024-11-03T05:30:00Z")]


# --- 1. a day across a DST change, minute by minute ------------------------------------


@dataclass(frozen=True)
class DstDay:
    zone: str
    day: str  # the local date of the change
    hour: int  # the local hour the change skips or repeats
    # (job, UTC due times) that must be among the runs: the nights' interesting ones.
    literal: dict[str, list[str]]


DST_DAYS = {
    "berlin-spring": DstDay(
        "Europe/Berlin",
        "2026-03-29",
        2,
        {
            "nightly": ["2026-03-29T01:00:00Z"],  # 02:30 does not exist: 03:00 CEST
            "nightly-report": ["2026-03-29T01:00:00Z"],  # 02:00 and 02:30 collapse
        },
    ),
    "berlin-fall": DstDay(
        "Europe/Berlin",
        "2026-10-25",
        2,
        {
            "nightly": ["2026-10-25T00:30:00Z"],  # the first 02:30 (CEST) only
            "nightly-report": ["2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z"],
            # 02:00 CEST and 02:00 CET both fire: one run per real hour
            "top-of-hour": ["2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z"],
        },
    ),
    "new-york-spring": DstDay(
        "America/New_York",
        "2026-03-08",
        2,
        {
            "nightly": ["2026-03-08T07:00:00Z"],  # 03:00 EDT
            "top-of-hour": ["2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z"],  # 01:00, 03:00
        },
    ),
    "new-york-fall": DstDay(
        "America/New_York",
        "2026-11-01",
        1,
        {
            "nightly": ["2026-11-01T05:30:00Z"],  # 01:30 EDT, not 01:30 EST
            "nightly-report": ["2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z"],
            "top-of-hour": ["2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z"],
        },
    ),
}


def walk_specs(day: DstDay) -> dict[str, JobSpec]:
    h = day.hour
    return {
        "nightly": cron_spec(f"30 {h} * * *", day.zone),
        "nightly-report": cron_spec(f"0,30 {h} * * *", day.zone, jitter=120),
        "top-of-hour": cron_spec("0 * * * *", day.zone),
        "quarter-hour": cron_spec("*/15 * * * *", day.zone),
        "jittered": cron_spec("*/30 * * * *", day.zone, jitter=900),
    }


async def next_due_on(database: Database, shard: int) -> dict[str, datetime | None]:
    async with database.connection(shard) as conn:
        rows = await conn.fetch("SELECT name, next_due_at FROM definitions")
    return {row["name"]: row["next_due_at"] for row in rows}


async def redo_from(
    database: Database, shard: int, earlier: dict[str, datetime | None], now: datetime
) -> int:
    """A failover owner redoing work: put ``next_due_at`` back to an earlier pass's and
    materialise at ``now`` from two connections at once. Returns the runs inserted."""
    async with database.connection(shard) as conn:
        await conn.executemany(
            "UPDATE definitions SET next_due_at = $2 WHERE name = $1", list(earlier.items())
        )
    async with database.connection(shard) as one, database.connection(shard) as two:
        done = await asyncio.gather(
            materialiser.materialise_all(one, now), materialiser.materialise_all(two, now)
        )
    return sum(d.runs for d in done)


async def walk_dst_day(database: Database, shard: int, case: str) -> None:
    """One scheduler replica that owns ``shard`` (and the day's jobs, tenant ``case``)
    passes every minute of the local day; then the runs are checked against the model."""
    day = DST_DAYS[case]
    tenant = case
    tz = zones.get(day.zone)
    start = datetime.fromisoformat(day.day).replace(tzinfo=tz).astimezone(UTC)
    end = (datetime.fromisoformat(day.day) + timedelta(days=1)).replace(tzinfo=tz)
    end = end.astimezone(UTC)
    assert end - start != timedelta(hours=24)  # the day really has a DST change
    clock = FrozenClock(start - MINUTE)
    specs = walk_specs(day)
    async with database.transaction(shard) as conn:
        for name, spec in specs.items():
            # What Jobs.put does, on the replica's own shard rather than the hashed one.
            due = next_due_after(spec, clock.now())
            await definitions.upsert(conn, shard, tenant, name, spec, due, ACTOR, clock.now())
    scheduler = Scheduler(database, clock=clock, shards=[shard])

    earlier = await next_due_on(database, shard)
    step = 0
    while clock.now() < end:
        clock.advance(60)
        await scheduler.pass_once()
        step += 1
        if step % 17 == 12:
            earlier = await next_due_on(database, shard)
        elif step % 17 == 0:
            # A failover owner redoing the last five passes at this instant, from two
            # connections at once, then a regular pass: nothing new, no error.
            current = await next_due_on(database, shard)
            assert await redo_from(database, shard, earlier, clock.now()) == 0
            await scheduler.pass_once()
            assert await next_due_on(database, shard) == current

    runs = await runs_of(database, tenant)
    horizon = end + LOOKAHEAD  # the last pass looked this far ahead
    for name, spec in specs.items():
        assert spec.schedule is not None
        expected = brute_force(spec.schedule.cron, day.zone, start - MINUTE, horizon)
        mine = [r for r in runs if r.job == name]
        assert [r.due_at for r in mine] == expected, name  # in order, each once
        for when in day.literal.get(name, []):
            assert utc(when) in expected, (name, when)
        offset = timedelta(
            seconds=hashing.jitter_offset(tenant, name, spec.schedule.jitter_seconds)
        )
        for run in mine:
            assert run.origin == "cron"
            assert run.idempotency_key == expected_key(tenant, name, run.due_at, day.zone)
            assert run.ready_at == run.due_at + offset
            if run.ready_at <= end:
                # promoted by the first pass at or after its ready time
                assert run.state == "ready", run
                assert run.ready_at <= run.updated_at < run.ready_at + MINUTE, run
            else:
                assert run.state == "scheduled", run
    assert len({r.idempotency_key for r in runs}) == len(runs)
    assert len({(r.job, r.due_at) for r in runs}) == len(runs)
    # The wildcard jobs kept their real-time cadence through the night.
    quarter = due_times(runs, "quarter-hour")
    assert {b - a for a, b in itertools.pairwise(quarter)} == {timedelta(minutes=15)}


async def test_dst_days_minute_by_minute_materialise_exactly_the_expected_runs(
    database: Database,
) -> None:
    """Four days with a DST change, each walked by its own replica owning one shard,
    all at once (a replica's pass touches only its shard, so the days do not meet)."""
    assert database.shard_count >= len(DST_DAYS)
    cases = list(DST_DAYS)
    outcomes = await asyncio.gather(
        *(walk_dst_day(database, shard, case) for shard, case in enumerate(cases)),
        return_exceptions=True,
    )
    failures = [(case, error) for case, error in zip(cases, outcomes, strict=True) if error]
    if failures:
        report = "\n".join(f"{case}: {error!r}" for case, error in failures)
        raise AssertionError(report) from failures[0][1]


# --- 1b. double materialisation --------------------------------------------------------


async def insert_due_definitions(
    conn: Connection, count: int, due: datetime, cron: str = "0 * * * *"
) -> None:
    """``count`` definitions of one shard, all due at ``due`` (straight into the table)."""
    await conn.execute(
        """INSERT INTO definitions (tenant, name, spec, queue, priority, next_due_at,
                                    created_at, updated_at)
           SELECT 'bulk', 'job-' || n,
                  jsonb_build_object('schedule', jsonb_build_object(
                      'cron', $3::text, 'timeZone', 'UTC', 'jitterSeconds', 60,
                      'missedRunPolicy', 'run_once'),
                      'retry', jsonb_build_object('maxAttempts', 3, 'baseSeconds', 30,
                                                  'maxSeconds', 1800),
                      'timeoutSeconds', 3600),
                  'default', 1, $2, $2, $2
           FROM generate_series(1, $1) AS n""",
        count,
        due,
        cron,
    )


async def test_two_materialisers_at_once_insert_every_run_exactly_once(
    database: Database,
) -> None:
    due = utc("2026-03-15T02:00:00Z")
    now = due - timedelta(seconds=30)
    async with database.connection(0) as conn:
        await insert_due_definitions(conn, 2500, due)
    async with database.connection(0) as one, database.connection(0) as two:
        first, second = await asyncio.gather(
            materialiser.materialise_all(one, now, batch=200),
            materialiser.materialise_all(two, now, batch=200),
        )
        assert first.runs + second.runs == 2500
        assert first.definitions + second.definitions == 2500
        again = await materialiser.materialise(one, now)
        assert again == materialiser.Materialised(0, 0, 0)
        # A failover owner redoing the work from scratch inserts nothing either.
        await one.execute("UPDATE definitions SET next_due_at = $1", due)
        redo = await materialiser.materialise_all(one, now, batch=200)
        assert (redo.definitions, redo.runs) == (2500, 0)
        counts = await one.fetchrow(
            """SELECT count(*) AS runs, count(DISTINCT (tenant, job, due_at)) AS distinct_due,
                      count(DISTINCT idempotency_key) AS keys, min(due_at) AS low,
                      max(due_at) AS high FROM runs"""
        )
        assert counts is not None
        assert dict(counts) == {
            "runs": 2500,
            "distinct_due": 2500,
            "keys": 2500,
            "low": due,
            "high": due,
        }
        assert await one.fetchval("SELECT count(DISTINCT next_due_at) FROM definitions") == 1
        assert await one.fetchval("SELECT min(next_due_at) FROM definitions") == due + timedelta(
            hours=1
        )


async def test_materialising_twice_at_the_same_instant_inserts_nothing_the_second_time(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "every-minute", cron_spec("* * * * *"), ACTOR)
    shard = jobs.shard_of(TENANT, "every-minute")
    clock.advance(30)
    async with database.connection(shard) as conn:
        first = await materialiser.materialise(conn, clock.now())
        second = await materialiser.materialise(conn, clock.now())
    assert (first.definitions, first.runs) == (1, 1)
    assert second == materialiser.Materialised(0, 0, 0)
    scheduler = Scheduler(database, clock=clock)
    await scheduler.pass_once()
    await scheduler.pass_once()
    assert due_times(await runs_of(database)) == [utc("2026-03-15T01:01:00Z")]


# --- 2. idempotency keys and jitter ------------------------------------------------------


async def test_idempotency_key_is_tenant_name_at_due_time_in_the_jobs_zone(
    database: Database,
) -> None:
    clock = FrozenClock(utc("2026-03-15T00:59:30Z"))
    jobs = Jobs(database, clock)
    await jobs.put("billing", "export-invoices", cron_spec("0 2 * * *", "Europe/Berlin"), ACTOR)
    await Scheduler(database, clock=clock).pass_once()
    [run] = await runs_of(database, "billing")
    assert run.idempotency_key == "billing/export-invoices@2026-03-15T02:00:00+01:00"
    assert run.due_at == utc("2026-03-15T01:00:00Z")
    # Summer time shows its own offset; the fall-back hour gives two distinct keys.
    summer = materialiser.idempotency_key(
        "billing", "export-invoices", utc("2026-07-15T00:00:00Z"), "Europe/Berlin"
    )
    assert summer == "billing/export-invoices@2026-07-15T02:00:00+02:00"
    assert [
        materialiser.idempotency_key("acme", "hourly", utc(t), "Europe/Berlin")
        for t in ("2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z")
    ] == ["acme/hourly@2026-10-25T02:00:00+02:00", "acme/hourly@2026-10-25T02:00:00+01:00"]
    assert (
        materialiser.idempotency_key("acme", "utc", utc("2026-03-15T02:00:00Z"), "UTC")
        == "acme/utc@2026-03-15T02:00:00+00:00"
    )


async def test_jitter_delays_ready_by_a_stable_offset_and_zero_pins_the_time(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "jittered", cron_spec("0 * * * *", jitter=600), ACTOR)
    await jobs.put(TENANT, "pinned", cron_spec("0 * * * *", jitter=0), ACTOR)
    # The hash is part of the product: the same offset in every process and release.
    assert hashing.jitter_offset(TENANT, "jittered", 600) == 477
    offset = timedelta(seconds=477)
    scheduler = Scheduler(database, clock=clock)
    clock.set(utc("2026-03-15T01:59:30Z"))
    await scheduler.pass_once()
    runs = {r.job: r for r in await runs_of(database)}
    assert runs["jittered"].due_at == runs["pinned"].due_at == utc("2026-03-15T02:00:00Z")
    assert runs["jittered"].ready_at == runs["jittered"].due_at + offset
    assert runs["pinned"].ready_at == runs["pinned"].due_at
    assert {r.state for r in runs.values()} == {"scheduled"}

    clock.set(utc("2026-03-15T02:00:00Z"))
    await scheduler.pass_once()
    runs = {r.job: r for r in await runs_of(database)}
    assert (runs["pinned"].state, runs["jittered"].state) == ("ready", "scheduled")
    clock.set(runs["jittered"].ready_at - timedelta(seconds=1))
    await scheduler.pass_once()
    assert {r.job: r.state for r in await runs_of(database)}["jittered"] == "scheduled"
    clock.set(runs["jittered"].ready_at)
    await scheduler.pass_once()
    assert {r.job: r.state for r in await runs_of(database)}["jittered"] == "ready"

    # The next hour keeps the same offset.
    clock.set(utc("2026-03-15T02:59:30Z"))
    await scheduler.pass_once()
    later = [r for r in await runs_of(database, job="jittered")]
    assert [r.ready_at - r.due_at for r in later] == [offset, offset]


# --- 3. missed runs, deadlines, one-offs, edits ------------------------------------------

DOWN_UNTIL = utc("2026-03-15T06:30:00Z")  # the clock fixture starts at 01:00Z


async def hourly_job_then_downtime(
    database: Database, clock: FrozenClock, policy: MissedRunPolicy, deadline: int | None = None
) -> tuple[Jobs, Scheduler]:
    jobs = Jobs(database, clock)
    await jobs.put(
        TENANT, "hourly", cron_spec("0 * * * *", policy=policy, deadline=deadline), ACTOR
    )
    scheduler = Scheduler(database, clock=clock)
    await scheduler.pass_once()
    assert await next_due_of(jobs, "hourly") == utc("2026-03-15T02:00:00Z")
    clock.set(DOWN_UNTIL)  # no pass while the scheduler is down
    return jobs, scheduler


async def test_run_once_inserts_one_catch_up_run_for_the_latest_missed_time(
    database: Database, clock: FrozenClock
) -> None:
    jobs, scheduler = await hourly_job_then_downtime(database, clock, MissedRunPolicy.run_once)
    await scheduler.pass_once()
    [catch_up] = await runs_of(database)
    assert (catch_up.due_at, catch_up.state) == (utc("2026-03-15T06:00:00Z"), "ready")
    assert await next_due_of(jobs, "hourly") == utc("2026-03-15T07:00:00Z")
    await walk(scheduler, clock, utc("2026-03-15T07:00:00Z"), 60)
    assert due_times(await runs_of(database)) == [
        utc("2026-03-15T06:00:00Z"),
        utc("2026-03-15T07:00:00Z"),
    ]


async def test_run_all_inserts_every_missed_time(database: Database, clock: FrozenClock) -> None:
    jobs, scheduler = await hourly_job_then_downtime(database, clock, MissedRunPolicy.run_all)
    await scheduler.pass_once()
    runs = await runs_of(database)
    assert due_times(runs) == [utc(f"2026-03-15T0{h}:00:00Z") for h in range(2, 7)]
    assert {r.state for r in runs} == {"ready"}
    view = await jobs.get(TENANT, "hourly")
    assert (view.definition.next_due_at, view.definition.missed_dropped) == (
        utc("2026-03-15T07:00:00Z"),
        0,
    )


async def test_run_all_keeps_the_latest_hundred_and_reports_how_many_it_dropped(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    spec = cron_spec("* * * * *", policy=MissedRunPolicy.run_all)
    await jobs.put(TENANT, "minutely", spec, ACTOR)
    scheduler = Scheduler(database, clock=clock)
    await scheduler.pass_once()  # 01:01 is within the lookahead
    clock.set(utc("2026-03-15T04:00:30Z"))  # 01:02 .. 04:00 missed: 179 times
    await scheduler.pass_once()
    runs = await runs_of(database)
    times = due_times(runs)
    assert len(times) == 1 + materialiser.RUN_ALL_CAP + 1
    assert times[0] == utc("2026-03-15T01:01:00Z")
    kept = times[1:-1]
    assert kept[0] == utc("2026-03-15T02:21:00Z")
    assert kept[-1] == utc("2026-03-15T04:00:00Z")
    assert all(b - a == MINUTE for a, b in itertools.pairwise(kept))
    assert times[-1] == utc("2026-03-15T04:01:00Z")  # the next one, within the lookahead
    view = await jobs.get(TENANT, "minutely")
    assert view.definition.missed_dropped == 179 - materialiser.RUN_ALL_CAP
    # Back to normal: no new catch-up, and the report stays until the next catch-up.
    await walk(scheduler, clock, utc("2026-03-15T04:02:30Z"), 30)
    assert due_times(await runs_of(database))[-3:] == [
        utc("2026-03-15T04:01:00Z"),
        utc("2026-03-15T04:02:00Z"),
        utc("2026-03-15T04:03:00Z"),
    ]
    view = await jobs.get(TENANT, "minutely")
    assert view.definition.missed_dropped == 79
    assert render.job(view)["missedRunsDropped"] == 79  # what the API and CLI show


async def test_skip_inserts_nothing_and_resumes_from_the_next_future_time(
    database: Database, clock: FrozenClock
) -> None:
    jobs, scheduler = await hourly_job_then_downtime(database, clock, MissedRunPolicy.skip)
    await scheduler.pass_once()
    assert await runs_of(database) == []
    assert await next_due_of(jobs, "hourly") == utc("2026-03-15T07:00:00Z")
    await walk(scheduler, clock, utc("2026-03-15T07:00:00Z"), 60)
    runs = await runs_of(database)
    assert [(r.due_at, r.state) for r in runs] == [(utc("2026-03-15T07:00:00Z"), "ready")]


@pytest.mark.parametrize(
    ("policy", "expected_hours"),
    [
        (MissedRunPolicy.run_once, [5]),
        (MissedRunPolicy.run_all, [2, 3, 4, 5]),
        (MissedRunPolicy.skip, []),
    ],
)
async def test_pause_then_resume_applies_the_missed_run_policy(
    database: Database, clock: FrozenClock, policy: MissedRunPolicy, expected_hours: list[int]
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "hourly", cron_spec("0 * * * *", policy=policy), ACTOR)
    scheduler = Scheduler(database, clock=clock)
    await scheduler.pass_once()
    clock.set(utc("2026-03-15T01:30:00Z"))
    await jobs.set_paused(TENANT, "hourly", True, ACTOR)
    await walk(scheduler, clock, utc("2026-03-15T05:30:00Z"), 1800)  # passes see nothing
    assert await runs_of(database) == []
    await jobs.set_paused(TENANT, "hourly", False, ACTOR)
    await scheduler.pass_once()
    assert due_times(await runs_of(database)) == [
        utc(f"2026-03-15T0{h}:00:00Z") for h in expected_hours
    ]
    await walk(scheduler, clock, utc("2026-03-15T06:00:00Z"), 60)
    assert due_times(await runs_of(database))[-1] == utc("2026-03-15T06:00:00Z")
    assert await next_due_of(jobs, "hourly") == utc("2026-03-15T07:00:00Z")


async def test_a_missed_run_older_than_the_starting_deadline_ends_skipped(
    database: Database, clock: FrozenClock
) -> None:
    _, scheduler = await hourly_job_then_downtime(
        database, clock, MissedRunPolicy.run_all, deadline=3600
    )
    await scheduler.pass_once()  # at 06:30: 05:00 and earlier are past their deadline
    runs = {r.due_at: r for r in await runs_of(database)}
    assert {t.hour: r.state for t, r in runs.items()} == {
        2: "skipped",
        3: "skipped",
        4: "skipped",
        5: "skipped",
        6: "ready",
    }
    assert runs[utc("2026-03-15T06:00:00Z")].start_deadline == utc("2026-03-15T07:00:00Z")
    shard = Jobs(database, clock).shard_of(TENANT, "hourly")
    async with database.connection(shard) as conn:
        leased = await leases.claim(conn, shard, ["default"], 10, "w1", 30, clock.now())
        assert [lease.due_at for lease in leased] == [utc("2026-03-15T06:00:00Z")]
        assert await leases.claim(conn, shard, ["default"], 10, "w1", 30, clock.now()) == []
        skipped = await conn.fetchval(
            "SELECT count(*) FROM runs WHERE state = 'skipped' AND finished_at = $1",
            clock.now(),
        )
    assert skipped == 4


async def test_a_scheduled_run_not_started_by_its_deadline_is_skipped_never_leasable(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "tight", cron_spec("0 * * * *", deadline=30), ACTOR)
    scheduler = Scheduler(database, clock=clock)
    clock.set(utc("2026-03-15T01:59:30Z"))
    await scheduler.pass_once()
    [run] = await runs_of(database)
    assert (run.state, run.start_deadline) == ("scheduled", utc("2026-03-15T02:00:30Z"))
    clock.set(utc("2026-03-15T02:00:45Z"))  # the scheduler was late: past the deadline
    await scheduler.pass_once()
    [run] = await runs_of(database)
    assert run.state == "skipped"
    shard = jobs.shard_of(TENANT, "tight")
    async with database.connection(shard) as conn:
        assert await leases.claim(conn, shard, ["default"], 10, "w1", 30, clock.now()) == []


async def test_the_starting_deadline_counts_from_the_jittered_ready_time(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "spread", cron_spec("0 * * * *", jitter=60, deadline=30), ACTOR)
    offset = timedelta(seconds=hashing.jitter_offset(TENANT, "spread", 60))
    scheduler = Scheduler(database, clock=clock)
    clock.set(utc("2026-03-15T01:59:30Z"))
    await scheduler.pass_once()
    due = utc("2026-03-15T02:00:00Z")
    [run] = await runs_of(database)
    assert (run.ready_at, run.start_deadline) == (
        due + offset,
        due + offset + timedelta(seconds=30),
    )
    clock.set(due + offset + timedelta(seconds=20))  # ready for 20 s: still within its 30
    await scheduler.pass_once()
    [run] = await runs_of(database)
    assert run.state == "ready"


@pytest.mark.parametrize("late", [False, True], ids=["future", "past"])
async def test_a_one_off_run_at_materialises_exactly_once(
    database: Database, clock: FrozenClock, late: bool
) -> None:
    jobs = Jobs(database, clock)
    at = clock.now() + timedelta(minutes=-90 if late else 3)
    await jobs.put(TENANT, "once", JobSpec(run_at=at), ACTOR)
    shard = jobs.shard_of(TENANT, "once")
    scheduler = Scheduler(database, clock=clock)
    await walk(scheduler, clock, clock.now() + timedelta(minutes=5), 30)
    # A failover owner redoing it from a stale view inserts nothing.
    async with database.connection(shard) as conn:
        await conn.execute("UPDATE definitions SET next_due_at = $1", at)
    await scheduler.pass_once()
    [run] = await runs_of(database)
    assert (run.due_at, run.ready_at, run.origin, run.state) == (at, at, "once", "ready")
    assert run.idempotency_key == expected_key(TENANT, "once", at, "UTC")
    assert await next_due_of(jobs, "once") is None


async def test_editing_the_schedule_neither_loses_nor_duplicates_runs(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "report", cron_spec("0 * * * *"), ACTOR)
    scheduler = Scheduler(database, clock=clock)
    await walk(scheduler, clock, utc("2026-03-15T01:59:30Z"), 300)
    assert due_times(await runs_of(database)) == [utc("2026-03-15T02:00:00Z")]
    assert await next_due_of(jobs, "report") == utc("2026-03-15T03:00:00Z")

    # Every half hour: 02:00 is in both schedules and stays one run.
    await jobs.put(TENANT, "report", cron_spec("*/30 * * * *"), ACTOR)
    assert await next_due_of(jobs, "report") == utc("2026-03-15T02:00:00Z")
    await walk(scheduler, clock, utc("2026-03-15T02:29:30Z"), 30)
    assert due_times(await runs_of(database)) == [
        utc("2026-03-15T02:00:00Z"),
        utc("2026-03-15T02:30:00Z"),
    ]

    # A quarter to: the materialised 02:30 run stays, the new times follow.
    await jobs.put(TENANT, "report", cron_spec("45 * * * *"), ACTOR)
    assert await next_due_of(jobs, "report") == utc("2026-03-15T02:45:00Z")
    # Changing something other than the schedule keeps next_due_at as it is.
    await walk(scheduler, clock, utc("2026-03-15T02:45:00Z"), 60)
    before = await next_due_of(jobs, "report")
    assert before == utc("2026-03-15T03:45:00Z")
    await jobs.put(TENANT, "report", cron_spec("45 * * * *", queue="reports"), ACTOR)
    assert await next_due_of(jobs, "report") == before
    await walk(scheduler, clock, utc("2026-03-15T03:45:00Z"), 60)
    runs = await runs_of(database)
    assert [(r.due_at, r.state) for r in runs] == [
        (utc("2026-03-15T02:00:00Z"), "ready"),
        (utc("2026-03-15T02:30:00Z"), "ready"),
        (utc("2026-03-15T02:45:00Z"), "ready"),
        (utc("2026-03-15T03:45:00Z"), "ready"),
    ]
    assert len({r.idempotency_key for r in runs}) == 4


# --- 5. the materialiser reads only due definitions ----------------------------------


async def test_lock_due_definitions_uses_the_definitions_due_index(database: Database) -> None:
    now = utc("2026-03-15T01:00:00Z")
    async with database.connection(0) as conn:
        await insert_due_definitions(conn, 5000, now + timedelta(days=30))
        await conn.execute(
            "UPDATE definitions SET next_due_at = $1 WHERE name IN ('job-1', 'job-2')", now
        )
        await conn.execute("ANALYZE definitions")
        plan = await conn.fetch(
            "EXPLAIN " + store_materialise.SQL.lock_due_definitions, now + LOOKAHEAD, 1000
        )
        text = "\n".join(row[0] for row in plan)
        assert "definitions_due" in text, text
        assert "Seq Scan" not in text, text
        done = await materialiser.materialise_all(conn, now)
    assert (done.definitions, done.runs) == (2, 2)


def test_a_starting_deadline_beyond_a_year_is_refused_at_every_entry() -> None:
    """A deadline no date can hold must never reach the store, where it would make
    every pass over its shard fail: the spec refuses it, for the API and manifests."""
    with pytest.raises(ValidationError, match="startingDeadlineSeconds"):
        JobSpec.model_validate(
            {"schedule": {"cron": "* * * * *", "startingDeadlineSeconds": 2**40}}
        )
    document = {
        "apiVersion": "tickwork.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "patient", "namespace": TENANT},
        "spec": {"schedule": {"cron": "* * * * *", "startingDeadlineSeconds": 2**40}},
    }
    with pytest.raises(manifests.ManifestError, match="startingDeadlineSeconds"):
        manifests.parse_document(document, "patient.yaml")


async def test_changing_policy_or_jitter_of_a_paused_job_keeps_its_missed_runs(
    database: Database, clock: FrozenClock
) -> None:
    """Only cron, timeZone and runAt move next_due_at: switching a paused job to
    run_all before resuming it catches up every time missed while it was paused."""
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "hourly", cron_spec("0 * * * *"), ACTOR)
    await jobs.set_paused(TENANT, "hourly", True, ACTOR)
    clock.set(utc("2026-03-15T04:30:00Z"))
    paused = cron_spec("0 * * * *", jitter=30, policy=MissedRunPolicy.run_all)
    await jobs.put(TENANT, "hourly", paused.model_copy(update={"paused": True}), ACTOR)
    assert await next_due_of(jobs, "hourly") == utc("2026-03-15T02:00:00Z")
    await jobs.set_paused(TENANT, "hourly", False, ACTOR)
    await Scheduler(database, clock=clock).pass_once()
    runs = await runs_of(database)
    assert due_times(runs) == [utc(f"2026-03-15T0{h}:00:00Z") for h in (2, 3, 4)]
    offset = timedelta(seconds=hashing.jitter_offset(TENANT, "hourly", 30))
    assert {r.ready_at - r.due_at for r in runs} == {offset}
    # A new zone is a new set of fire times: next_due_at moves to the first one after now.
    await jobs.put(TENANT, "hourly", cron_spec("0 * * * *", "Asia/Kolkata"), ACTOR)
    assert await next_due_of(jobs, "hourly") == utc("2026-03-15T04:30:00Z") + timedelta(hours=1)
