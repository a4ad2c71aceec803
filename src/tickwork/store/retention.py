"""Run history retention: one partition of ``attempts`` and of ``finished_runs`` per
UTC day.

Partitions are created a few days ahead, so rows never land in the default partition
while the scheduler runs; history older than the retention (30 days by default) is a
partition drop, not a ``DELETE``. A day whose rows already sit in the default partition
(the scheduler was down for days, or the rows came from before version 5) keeps them
there, and retention deletes them row by row. Run keys (cron fire times, idempotency
keys) of runs no longer live are forgotten after the same retention.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, date, datetime, time, timedelta
from typing import Final

import asyncpg

from tickwork.store.database import Connection

logger = logging.getLogger(__name__)

DEFAULT_RETENTION_DAYS: Final = 30
DAYS_AHEAD: Final = 3
# The day-partitioned tables (a fixed allow-list: their names go into DDL).
PARTITIONED: Final = ("attempts", "finished_runs")
_PARTITION: Final = re.compile(r"^(attempts|finished_runs)_(\d{8})$")

LIST_PARTITIONS_OF: Final = """
SELECT child.relname AS name
FROM pg_inherits
JOIN pg_class AS parent ON parent.oid = pg_inherits.inhparent
JOIN pg_class AS child ON child.oid = pg_inherits.inhrelid
JOIN pg_namespace AS ns ON ns.oid = parent.relnamespace
WHERE parent.relname = $1 AND ns.nspname = current_schema()
"""
LIST_PARTITIONS: Final = LIST_PARTITIONS_OF.replace("$1", "'attempts'")
TABLE_EXISTS: Final = "SELECT to_regclass($1) IS NOT NULL"
TODAY: Final = "SELECT (coalesce($1::timestamptz, now()) AT TIME ZONE 'UTC')::date"
DELETE_OLD_DEFAULT_ROWS: Final = {
    "attempts": "DELETE FROM attempts_default WHERE finished_at < $1",
    "finished_runs": "DELETE FROM finished_runs_default WHERE finished_at < $1",
}
FORGET_OLD_KEYS: Final = """
DELETE FROM run_keys AS k
WHERE k.created_at < $1
  AND NOT EXISTS (SELECT 1 FROM live_runs AS r WHERE r.id = k.run_id)
"""


def partition_name(day: date, parent: str = "attempts") -> str:
    if parent not in PARTITIONED:
        raise ValueError(f"{parent!r} is not partitioned by day")
    return f"{parent}_{day:%Y%m%d}"


def _create_partition_sql(day: date, parent: str) -> str:
    # DDL takes no parameters; the names come from the allow-list and the bounds from a
    # date object only.
    start, end = day.isoformat(), (day + timedelta(days=1)).isoformat()
    return (
        f"CREATE TABLE IF NOT EXISTS {partition_name(day, parent)} PARTITION OF {parent} "
        f"FOR VALUES FROM ('{start} 00:00:00+00') TO ('{end} 00:00:00+00')"
    )


async def today(conn: Connection, now: datetime | None = None) -> date:
    value = await conn.fetchval(TODAY, now)
    assert isinstance(value, date)
    return value


async def ensure_partitions(
    conn: Connection,
    now: datetime | None = None,
    days_ahead: int = DAYS_AHEAD,
    parent: str = "attempts",
) -> list[str]:
    """Create the partitions of ``parent`` for today and the next ``days_ahead`` days;
    return the new ones."""
    first = await today(conn, now)
    existing = {row["name"] for row in await conn.fetch(LIST_PARTITIONS_OF, parent)}
    created = []
    for offset in range(days_ahead + 1):
        day = first + timedelta(days=offset)
        name = partition_name(day, parent)
        if name in existing:
            continue
        try:
            async with conn.transaction():
                await conn.execute(_create_partition_sql(day, parent))
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
    conn: Connection, now: datetime | None = None, days_ahead: int = DAYS_AHEAD
) -> list[str]:
    """``ensure_partitions`` for every day-partitioned table the schema has (a shard
    being migrated step by step may not have all of them yet)."""
    created = []
    for parent in PARTITIONED:
        if await conn.fetchval(TABLE_EXISTS, parent):
            created += await ensure_partitions(conn, now, days_ahead, parent)
    return created


async def drop_expired(
    conn: Connection, now: datetime | None = None, retention_days: int = DEFAULT_RETENTION_DAYS
) -> list[str]:
    """Drop the daily partitions (attempts and finished runs) older than the retention,
    and forget the keys of runs that old; return the partitions' names."""
    cutoff = await today(conn, now) - timedelta(days=retention_days)
    cutoff_instant = datetime.combine(cutoff, time(), tzinfo=UTC)
    dropped = []
    for parent in PARTITIONED:
        for row in await conn.fetch(LIST_PARTITIONS_OF, parent):
            match = _PARTITION.match(row["name"])
            if match is None:
                continue
            day = datetime.strptime(match.group(2), "%Y%m%d").date()
            if day < cutoff:
                name = partition_name(day, parent)
                async with conn.transaction():
                    await conn.execute(f"DROP TABLE IF EXISTS {name}")
                dropped.append(name)
        await conn.execute(DELETE_OLD_DEFAULT_ROWS[parent], cutoff_instant)
    await conn.execute(FORGET_OLD_KEYS, cutoff_instant)
    return dropped
