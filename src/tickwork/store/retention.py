"""Attempt history retention: one partition of ``attempts`` per UTC day.

Partitions are created a few days ahead, so rows never land in the default partition
while the scheduler runs; history older than the retention is a partition drop, not a
``DELETE``. A day whose rows already sit in the default partition (the scheduler was
down for days) keeps them there, and retention deletes them row by row.

Several schedulers (or ``tickwork dev``) may maintain the same shard at once: each
maintenance runs in one transaction holding a lock per shard, so they take turns.
Partition names come from a fixed pattern (``attempts_YYYYMMDD``), are checked against
it, and reach the DDL through PostgreSQL's ``format('%I')``; the bounds are bound
parameters.
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
# One lock per shard schema (shards may share a database): the key hashes the schema.
LOCK_SHARD_MAINTENANCE: Final = (
    "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '/attempts', 0))"
)
# DDL takes no bind parameters: PostgreSQL quotes the name (%I) and the bounds (%L)
# given as parameters, and the statement it returns is run as is.
CREATE_PARTITION_DDL: Final = (
    "SELECT format('CREATE TABLE %I PARTITION OF attempts FOR VALUES FROM (%L) TO (%L)', "
    "$1::text, $2::timestamptz, $3::timestamptz)"
)
DROP_PARTITION_DDL: Final = "SELECT format('DROP TABLE IF EXISTS %I', $1::text)"


def partition_name(day: date) -> str:
    return f"attempts_{day:%Y%m%d}"


def _checked(name: str) -> str:
    if _PARTITION.fullmatch(name) is None:
        raise ValueError(f"not an attempts partition name: {name!r}")
    return name


async def _create_partition(conn: Connection, day: date) -> None:
    start = datetime.combine(day, time(), tzinfo=UTC)
    ddl = await conn.fetchval(
        CREATE_PARTITION_DDL, _checked(partition_name(day)), start, start + timedelta(days=1)
    )
    await conn.execute(ddl)


async def _drop_partition(conn: Connection, name: str) -> None:
    await conn.execute(await conn.fetchval(DROP_PARTITION_DDL, _checked(name)))


async def today(conn: Connection, now: datetime | None = None) -> date:
    value = await conn.fetchval(TODAY, now)
    assert isinstance(value, date)
    return value


async def ensure_partitions(
    conn: Connection, now: datetime | None = None, days_ahead: int = DAYS_AHEAD
) -> list[str]:
    """Create the partitions of today and the next ``days_ahead`` days; return new ones."""
    created = []
    async with conn.transaction():
        await conn.execute(LOCK_SHARD_MAINTENANCE)
        first = await today(conn, now)
        existing = {row["name"] for row in await conn.fetch(LIST_PARTITIONS)}
        for offset in range(days_ahead + 1):
            day = first + timedelta(days=offset)
            if partition_name(day) in existing:
                continue
            try:
                async with conn.transaction():
                    await _create_partition(conn, day)
            except asyncpg.DuplicateTableError:
                continue  # made meanwhile by a runner that does not take the lock
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
    dropped = []
    async with conn.transaction():
        await conn.execute(LOCK_SHARD_MAINTENANCE)
        cutoff = await today(conn, now) - timedelta(days=retention_days)
        for row in await conn.fetch(LIST_PARTITIONS):
            match = _PARTITION.match(row["name"])
            if match is None:
                continue
            day = datetime.strptime(match.group(1), "%Y%m%d").date()
            if day < cutoff:
                await _drop_partition(conn, row["name"])
                dropped.append(row["name"])
        await conn.execute(DELETE_OLD_DEFAULT_ROWS, datetime.combine(cutoff, time(), tzinfo=UTC))
    return dropped
