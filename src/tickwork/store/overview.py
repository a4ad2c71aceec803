"""The dashboard's reads of one shard: activity per minute, backlog, start lag, the DLQ
size, the shard's scheduler owner, and a filtered, sorted page of a tenant's jobs.

Rows are returned as the store reads them; the engine merges shards and names things.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from tickwork.core.records import Definition, Run
from tickwork.store import queries
from tickwork.store.database import Connection

MINUTES: Final = queries.get("overview_minutes")
BACKLOG: Final = queries.get("overview_backlog")
START_LAG: Final = queries.get("overview_start_lag")
DEAD: Final = queries.get("overview_dead")
SHARD_OWNER: Final = queries.get("shard_owner")
SHARD_TENANTS: Final = queries.get("shard_tenants")
JOB_TABLE: Final = queries.get("job_table")
RUNS_BY_IDS: Final = queries.get("runs_by_ids")

# Start lag buckets: bucket b holds lags in [1 ms * 1.1^b, 1 ms * 1.1^(b+1)).
LAG_BUCKET_BASE: Final = 0.001
LAG_BUCKET_GROWTH: Final = 1.1


@dataclass(frozen=True, slots=True)
class MinuteCounts:
    minute: datetime
    started: int
    succeeded: int
    failed: int


@dataclass(frozen=True, slots=True)
class ReadyCount:
    queue: str
    priority: int
    ready: int
    oldest_ready_at: datetime


@dataclass(frozen=True, slots=True)
class LagBucket:
    priority: int
    bucket: int
    leases: int


@dataclass(frozen=True, slots=True)
class EpochHolder:
    epoch: int
    owner: str | None
    acquired_at: datetime | None


@dataclass(frozen=True, slots=True)
class JobRow:
    definition: Definition
    active: int
    dead: int
    next_scheduled: datetime | None
    next_run_at: datetime | None
    last_id: int | None
    last_finished_at: datetime | None
    total: int


async def minutes(conn: Connection, tenant: str, since: datetime) -> list[MinuteCounts]:
    rows = await conn.fetch(MINUTES, tenant, since)
    return [
        MinuteCounts(row["minute"], row["started"], row["succeeded"], row["failed"]) for row in rows
    ]


async def backlog(conn: Connection, tenant: str) -> list[ReadyCount]:
    rows = await conn.fetch(BACKLOG, tenant)
    return [
        ReadyCount(row["queue"], row["priority"], row["ready"], row["oldest_ready_at"])
        for row in rows
    ]


async def start_lag(conn: Connection, tenant: str, since: datetime) -> list[LagBucket]:
    rows = await conn.fetch(START_LAG, tenant, since, math.log(LAG_BUCKET_GROWTH))
    return [LagBucket(row["priority"], row["bucket"], row["leases"]) for row in rows]


async def dead(conn: Connection, tenant: str) -> int:
    count: int = await conn.fetchval(DEAD, tenant)
    return count


async def epoch_holder(conn: Connection) -> EpochHolder:
    row = await conn.fetchrow(SHARD_OWNER)
    if row is None:  # pragma: no cover - every migrated shard has its row
        return EpochHolder(0, None, None)
    return EpochHolder(row["epoch"], row["owner"], row["acquired_at"])


async def tenants(conn: Connection, limit: int) -> list[str]:
    return [row["tenant"] for row in await conn.fetch(SHARD_TENANTS, limit)]


async def job_table(
    conn: Connection,
    shard: int,
    tenant: str,
    *,
    contains: str | None,
    queue: str | None,
    show: str,
    sort: str,
    limit: int,
) -> list[JobRow]:
    rows = await conn.fetch(JOB_TABLE, tenant, contains, queue, show, sort, limit)
    return [
        JobRow(
            definition=Definition.from_record(shard, row),
            active=row["active"],
            dead=row["dead"],
            next_scheduled=row["next_scheduled"],
            next_run_at=row["next_run_at"],
            last_id=row["last_id"],
            last_finished_at=row["last_finished_at"],
            total=row["total"],
        )
        for row in rows
    ]


async def runs_by_ids(conn: Connection, shard: int, ids: Sequence[int]) -> list[Run]:
    if not ids:
        return []
    return [Run.from_record(shard, row) for row in await conn.fetch(RUNS_BY_IDS, list(ids))]
