"""Attempt history lives in daily partitions; retention drops whole days."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.core.clock import Clock, DatabaseClock, FrozenClock
from tickwork.core.records import Completion, Outcome
from tickwork.core.settings import SchedulerSettings
from tickwork.core.spec import JobSpec
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.scheduler import Scheduler
from tickwork.store import leases, retention, runs
from tickwork.store.database import Database

# Long before any day the tests run on: migrating creates the partitions of the real
# today and the next days, which must not be the days these tests create and drop.
DAY = datetime(2001, 5, 10, 12, 0, tzinfo=UTC)


async def _partitions(database: Database, shard: int) -> set[str]:
    async with database.connection(shard) as conn:
        return {row["name"] for row in await conn.fetch(retention.SQL.partitions_of, "attempts")}


async def _finish_one_run(database: Database, jobs: Jobs, clock: Clock) -> int:
    """A run whose one attempt failed for good: it is dead, its attempt has a row (a
    succeeded run's attempt is its finished row, kept in the same days)."""
    run, _ = await jobs.enqueue("acme", "report", EnqueueRequest(), "test")
    async with database.connection(run.shard) as conn:
        [lease] = await leases.claim(conn, run.shard, ["default"], 1, "w", 30, clock.now())
        await leases.complete(
            conn,
            run.shard,
            [Completion(lease.id, lease.fencing_token, Outcome.failed, retryable=False)],
            clock.now(),
        )
    return run.shard


async def test_attempts_land_in_daily_partitions_and_old_days_are_dropped(
    database: Database,
) -> None:
    clock = FrozenClock(DAY)
    jobs = Jobs(database, clock)
    await jobs.put("acme", "report", JobSpec(), "test")
    scheduler = Scheduler(database, SchedulerSettings(retention_days=30), clock=clock)
    await scheduler.pass_once()
    shard = jobs.shard_of("acme", "report")
    names = await _partitions(database, shard)
    assert {"attempts_20010510", "attempts_20010511", "attempts_20010513"} <= names

    await _finish_one_run(database, jobs, clock)
    async with database.connection(shard) as conn:
        assert await conn.fetchval("SELECT count(*) FROM attempts_20010510") == 1
        assert await conn.fetchval("SELECT count(*) FROM attempts_default") == 0

    # 31 days later the day of that attempt is past the retention: its partition goes.
    clock.advance(timedelta(days=31).total_seconds())
    async with database.connection(shard) as conn:
        await retention.ensure_partitions(conn, clock.now())
        dropped = await retention.drop_expired(conn, clock.now(), retention_days=30)
        assert "attempts_20010510" in dropped
        assert await conn.fetchval("SELECT count(*) FROM attempts") == 0
    assert "attempts_20010610" in await _partitions(database, shard)


async def test_a_day_already_in_the_default_partition_stays_there(database: Database) -> None:
    clock = FrozenClock(DAY)
    jobs = Jobs(database, clock)
    await jobs.put("acme", "report", JobSpec(), "test")
    shard = await _finish_one_run(database, jobs, clock)  # no partitions yet: default
    async with database.connection(shard) as conn:
        created = await retention.ensure_partitions(conn, clock.now(), days_ahead=1)
        assert created == ["attempts_20010511"]
        assert await conn.fetchval("SELECT count(*) FROM attempts_default") == 1
        clock.advance(timedelta(days=40).total_seconds())
        await retention.drop_expired(conn, clock.now(), retention_days=30)
        assert await conn.fetchval("SELECT count(*) FROM attempts_default") == 0


async def test_a_migrated_shard_keeps_its_first_attempts_out_of_the_default_partition(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """The first runs may finish before any scheduler pass (tickwork dev starts its API,
    worker and scheduler together): they still land in their day's partition, and the
    scheduler has nothing to warn about."""
    clock = DatabaseClock()
    jobs = Jobs(database, clock)
    await jobs.put("acme", "report", JobSpec(), "test")
    shard = await _finish_one_run(database, jobs, clock)
    async with database.connection(shard) as conn:
        assert await conn.fetchval("SELECT count(*) FROM attempts_default") == 0
        assert await conn.fetchval("SELECT count(*) FROM attempts") == 1
    with caplog.at_level(logging.INFO):
        await Scheduler(database, clock=clock).pass_once()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_concurrent_maintenance_of_one_shard_takes_turns(database: Database) -> None:
    """Schedulers starting together on a fresh database all maintain the partitions:
    each new day is created exactly once and nobody fails (it raised
    DuplicateTableError before)."""
    async with contextlib.AsyncExitStack() as stack:
        connections = [await stack.enter_async_context(database.connection(0)) for _ in range(4)]
        for round_number in range(3):
            now = DAY + timedelta(days=10 * round_number)
            results = await asyncio.gather(
                *(retention.ensure_partitions(conn, now) for conn in connections),
                return_exceptions=True,
            )
            assert not [r for r in results if isinstance(r, BaseException)], results
            created = [name for names in results for name in names]  # type: ignore[union-attr]
            day = now.date()
            expected = {retention.partition_name(day + timedelta(days=n)) for n in range(4)}
            assert sorted(created) == sorted(expected)  # each made once, by one of them
        expired = await asyncio.gather(
            *(
                retention.drop_expired(conn, DAY + timedelta(days=45), retention_days=30)
                for conn in connections
            )
        )
        # Past the retention (cut-off: day 15): the days of the first two rounds.
        assert sorted(name for names in expired for name in names) == sorted(
            retention.partition_name(DAY.date() + timedelta(days=d))
            for d in (0, 1, 2, 3, 10, 11, 12, 13)
        )


def test_partition_names_are_checked_before_they_reach_ddl() -> None:
    assert retention._checked("attempts_20260510") == "attempts_20260510"
    for name in ('attempts_2026051"; DROP TABLE runs; --', "runs", "attempts_default"):
        with pytest.raises(ValueError, match="not an attempts partition name"):
            retention._checked(name)


async def test_audit_entries_past_their_retention_are_deleted_by_the_scheduler(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FrozenClock(DAY)
    shard = 0
    async with database.connection(shard) as conn:
        for days_old in (400, 366, 364, 10):
            at = DAY - timedelta(days=days_old)
            await runs.audit(conn, "acme", f"job-{days_old}", None, "put", "ops", None, at)
        # A small batch shows the deletion going in several transactions.
        assert await retention.forget_old_audit(conn, DAY, 365, batch=1) == 2
        kept = [r["job"] for r in await conn.fetch("SELECT job FROM audit_log ORDER BY at")]
        assert kept == ["job-364", "job-10"]
    # The scheduler's maintenance does it with its own retention.
    scheduler = Scheduler(database, SchedulerSettings(audit_retention_days=30), clock=clock)
    with caplog.at_level(logging.INFO, "tickwork.engine.scheduler"):
        await scheduler.pass_once()
    async with database.connection(shard) as conn:
        kept = [r["job"] for r in await conn.fetch("SELECT job FROM audit_log ORDER BY at")]
    assert kept == ["job-10"]
    assert "1 audit entries past their retention deleted" in caplog.text


async def test_finding_old_audit_entries_reads_the_index_not_the_log(database: Database) -> None:
    async with database.connection(0) as conn:
        for n in range(2000):
            await runs.audit(conn, "acme", f"job-{n % 50}", None, "put", "ops", None, DAY)
        await conn.execute("ANALYZE audit_log")
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + retention.SQL.forget_old_audit, DAY - timedelta(days=1), 100
        )
    text = str(plan)
    assert "audit_log_at" in text and "Seq Scan" not in text, text
