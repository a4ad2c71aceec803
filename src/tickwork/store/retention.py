"""Run history retention: one partition of ``attempts`` and of ``finished_runs`` per
UTC day.

Partitions are created a few days ahead, so rows never land in the default partition
while the scheduler runs; history older than the retention (30 days by default) is a
partition drop, not a ``DELETE``. A day whose rows already sit in the default partition
(the scheduler was down for days, or the rows came from before version 5) keeps them
there, and retention deletes them row by row. Run keys (cron fire times, idempotency
keys) of runs no longer live are forgotten after the same retention.

Several schedulers (or ``tickwork dev``) may maintain the same shard at once: each
maintenance runs in one transaction holding a lock per shard, so they take turns.
Partition names come from a fixed pattern (``attempts_YYYYMMDD``,
``finished_runs_YYYYMMDD``), are checked against it, and reach the DDL through
PostgreSQL's ``format('%I')``; the bounds are bound parameters.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, date, datetime, time, timedelta
from typing import Final

import asyncpg

from tickwork.store import clock, enqueue_keys, epochs, queries
from tickwork.store.database import Connection

logger = logging.getLogger(__name__)

DEFAULT_RETENTION_DAYS: Final = 30
# Audit entries answer "who changed this, and when" long after the runs are gone.
DEFAULT_AUDIT_RETENTION_DAYS: Final = 365
AUDIT_DELETE_BATCH: Final = 10_000
DAYS_AHEAD: Final = 3
# The day-partitioned tables (a fixed allow-list: their names go into DDL).
PARTITIONED: Final = ("attempts", "finished_runs")
_PARTITION: Final = re.compile(r"^(attempts|finished_runs)_(\d{8})$")


class SQL(queries.Statements):
    partitions_of: str
    table_exists: str
    utc_today: str
    forget_old_keys: str
    forget_old_audit: str
    lock_shard_maintenance: str
    create_partition_ddl: str
    drop_partition_ddl: str


DELETE_OLD_DEFAULT_ROWS: Final = {
    "attempts": queries.get("delete_old_default_attempts"),
    "finished_runs": queries.get("delete_old_default_finished_runs"),
}


def partition_name(day: date, parent: str = "attempts") -> str:
    if parent not in PARTITIONED:
        raise ValueError(f"{parent!r} is not partitioned by day")
    return f"{parent}_{day:%Y%m%d}"


def _checked(name: str) -> str:
    if _PARTITION.fullmatch(name) is None:
        raise ValueError(f"not an attempts partition name (nor a finished_runs one): {name!r}")
    return name


async def _create_partition(conn: Connection, day: date, parent: str) -> None:
    start = datetime.combine(day, time(), tzinfo=UTC)
    ddl = await conn.fetchval(
        SQL.create_partition_ddl,
        _checked(partition_name(day, parent)),
        start,
        start + timedelta(days=1),
        parent,
    )
    await conn.execute(ddl)


async def _drop_partition(conn: Connection, name: str) -> None:
    await conn.execute(await conn.fetchval(SQL.drop_partition_ddl, _checked(name)))


async def today(conn: Connection, now: datetime | None = None) -> date:
    value = await conn.fetchval(SQL.utc_today, now)
    assert isinstance(value, date)
    return value


async def ensure_partitions(
    conn: Connection,
    now: datetime | None = None,
    days_ahead: int = DAYS_AHEAD,
    parent: str = "attempts",
    *,
    fence: epochs.Fence | None = None,
) -> list[str]:
    """Create the partitions of ``parent`` for today and the next ``days_ahead`` days;
    return the new ones."""
    created = []
    async with conn.transaction():
        await epochs.check(conn, fence)
        await conn.execute(SQL.lock_shard_maintenance)
        first = await today(conn, now)
        existing = {row["name"] for row in await conn.fetch(SQL.partitions_of, parent)}
        for offset in range(days_ahead + 1):
            day = first + timedelta(days=offset)
            name = partition_name(day, parent)
            if name in existing:
                continue
            try:
                async with conn.transaction():
                    await _create_partition(conn, day, parent)
            except asyncpg.DuplicateTableError:
                continue  # made meanwhile by a runner that does not take the lock
            except asyncpg.CheckViolationError:
                logger.warning(
                    "%s of %s are in the default partition; leaving them there",
                    parent,
                    day,
                    extra={"action": "retention-skip"},
                )
                continue
            created.append(name)
    return created


async def ensure_all_partitions(
    conn: Connection,
    now: datetime | None = None,
    days_ahead: int = DAYS_AHEAD,
    *,
    fence: epochs.Fence | None = None,
) -> list[str]:
    """``ensure_partitions`` for every day-partitioned table the schema has (a shard
    being migrated step by step may not have all of them yet)."""
    created = []
    for parent in PARTITIONED:
        if await conn.fetchval(SQL.table_exists, parent):
            created += await ensure_partitions(conn, now, days_ahead, parent, fence=fence)
    return created


async def drop_expired(
    conn: Connection,
    now: datetime | None = None,
    retention_days: int = DEFAULT_RETENTION_DAYS,
    *,
    fence: epochs.Fence | None = None,
) -> list[str]:
    """Drop the daily partitions (attempts and finished runs) older than the retention,
    and forget the keys of runs that old; return the partitions' names."""
    dropped = []
    async with conn.transaction():
        await epochs.check(conn, fence)
        await conn.execute(SQL.lock_shard_maintenance)
        cutoff = await today(conn, now) - timedelta(days=retention_days)
        cutoff_instant = datetime.combine(cutoff, time(), tzinfo=UTC)
        for parent in PARTITIONED:
            if not await conn.fetchval(SQL.table_exists, parent):
                continue
            for row in await conn.fetch(SQL.partitions_of, parent):
                match = _PARTITION.match(row["name"])
                if match is None:
                    continue
                day = datetime.strptime(match.group(2), "%Y%m%d").date()
                if day < cutoff:
                    await _drop_partition(conn, row["name"])
                    dropped.append(row["name"])
            await conn.execute(DELETE_OLD_DEFAULT_ROWS[parent], cutoff_instant)
        if await conn.fetchval(SQL.table_exists, "run_keys"):
            await conn.execute(SQL.forget_old_keys, cutoff_instant)
        if await conn.fetchval(SQL.table_exists, "enqueue_keys"):
            await enqueue_keys.forget_old(conn, cutoff_instant)
    return dropped


async def forget_old_audit(
    conn: Connection,
    now: datetime | None = None,
    retention_days: int = DEFAULT_AUDIT_RETENTION_DAYS,
    *,
    fence: epochs.Fence | None = None,
    batch: int = AUDIT_DELETE_BATCH,
) -> int:
    """Delete the audit entries older than ``retention_days``, ``batch`` rows per
    transaction (a year of entries going at once holds no lock for long); return how
    many went."""
    cutoff = await clock.now(conn, now) - timedelta(days=retention_days)
    total = 0
    while True:
        async with conn.transaction():
            await epochs.check(conn, fence)
            status = await conn.execute(SQL.forget_old_audit, cutoff, batch)
        deleted = int(status.split()[-1])
        total += deleted
        if deleted < batch:
            return total
