"""Attempt history retention: one partition of ``attempts`` per UTC day.

Partitions are created a few days ahead, so rows never land in the default partition
while the scheduler runs; history older than the retention is a partition drop, not a
``DELETE``. A day whose rows already sit in the default partition (the scheduler was
down for days) keeps them there, and retention deletes them row by row.
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
_PARTITION: Final = re.compile(r"^attempts_(\d{8})$")

LIST_PARTITIONS: Final = """
SELECT child.relname AS name
FROM pg_inherits
JOIN pg_class AS parent ON parent.oid = pg_inherits.inhparent
JOIN pg_class AS child ON child.oid = pg_inherits.inhrelid
JOIN pg_namespace AS ns ON ns.oid = parent.relnamespace
WHERE parent.relname = 'attempts' AND ns.nspname = current_schema()
"""
TODAY: Final = "SELECT (coalesce($1::timestamptz, now()) AT TIME ZONE 'UTC')::date"
DELETE_OLD_DEFAULT_ROWS: Final = "DELETE FROM attempts_default WHERE finished_at < $1"


def partition_name(day: date) -> str:
    return f"attempts_{day:%Y%m%d}"


def _create_partition_sql(day: date) -> str:
    # DDL takes no parameters; the name and bounds come from a date object only.
    start, end = day.isoformat(), (day + timedelta(days=1)).isoformat()
    return (
        f"CREATE TABLE IF NOT EXISTS {partition_name(day)} PARTITION OF attempts "
        f"FOR VALUES FROM ('{start} 00:00:00+00') TO ('{end} 00:00:00+00')"
    )


async def today(conn: Connection, now: datetime | None = None) -> date:
    value = await conn.fetchval(TODAY, now)
    assert isinstance(value, date)
    return value


async def ensure_partitions(
    conn: Connection, now: datetime | None = None, days_ahead: int = DAYS_AHEAD
) -> list[str]:
    """Create the partitions of today and the next ``days_ahead`` days; return new ones."""
    first = await today(conn, now)
    existing = {row["name"] for row in await conn.fetch(LIST_PARTITIONS)}
    created = []
    for offset in range(days_ahead + 1):
        day = first + timedelta(days=offset)
        if partition_name(day) in existing:
            continue
        try:
            async with conn.transaction():
                await conn.execute(_create_partition_sql(day))
        except asyncpg.CheckViolationError:
            logger.warning(
                "attempts of %s are in the default partition; leaving them there",
                day,
                extra={"action": "retention-skip"},
            )
            continue
        created.append(partition_name(day))
    return created


async def drop_expired(
    conn: Connection, now: datetime | None = None, retention_days: int = DEFAULT_RETENTION_DAYS
) -> list[str]:
    """Drop the daily partitions older than the retention; return their names."""
    cutoff = await today(conn, now) - timedelta(days=retention_days)
    dropped = []
    for row in await conn.fetch(LIST_PARTITIONS):
        match = _PARTITION.match(row["name"])
        if match is None:
            continue
        day = datetime.strptime(match.group(1), "%Y%m%d").date()
        if day < cutoff:
            async with conn.transaction():
                await conn.execute(f"DROP TABLE IF EXISTS {partition_name(day)}")
            dropped.append(partition_name(day))
    await conn.execute(DELETE_OLD_DEFAULT_ROWS, datetime.combine(cutoff, time(), tzinfo=UTC))
    return dropped
