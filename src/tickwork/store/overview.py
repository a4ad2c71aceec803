"""The dashboard's reads of one shard: activity per minute, backlog, start lag, the DLQ
size, the shard's scheduler owner, and a filtered, sorted page of a tenant's jobs.

Rows are returned as the store reads them; the engine merges shards and names things.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from tickwork.core.records import Definition, Row, Run
from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    overview_runs: str
    overview_attempts: str
    overview_backlog: str
    overview_dead: str
    shard_owner: str
    shard_tenants: str
    job_table: str
    runs_by_ids: str
    dead_jobs: str


# Start lag buckets: bucket b holds lags in [1 ms * 1.1^b, 1 ms * 1.1^(b+1)).
LAG_BUCKET_BASE: Final = 0.001
LAG_BUCKET_GROWTH: Final = 1.1


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


# GROUPING() of the overview queries' grouping sets: a bit per argument left out.
_STARTED_RUNS: Final = 0b0111
_SUCCEEDED_RUNS: Final = 0b1011
_LAG: Final = 0b1100
_STARTED_ATTEMPTS: Final = 0b01
_FAILED_ATTEMPTS: Final = 0b10


@dataclass
class Activity:
    """Counts per minute of the window (0 = its first minute), and start lag buckets."""

    started: Counter[int] = field(default_factory=Counter)
    succeeded: Counter[int] = field(default_factory=Counter)
    failed: Counter[int] = field(default_factory=Counter)
    lag: list[LagBucket] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class EpochHolder:
    epoch: int
    owner: str | None
    acquired_at: datetime | None
    last_pass_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class JobRow:
    """A row of the job table; only the rows of the page shown become Definitions."""

    shard: int
    row: Row
    name: str
    paused: bool
    zone: str | None
    active: int
    dead: int
    next_scheduled: datetime | None
    next_run_at: datetime | None
    last_id: int | None
    last_finished_at: datetime | None
    total: int

    def definition(self) -> Definition:
        return Definition.from_record(self.shard, self.row)


async def activity(conn: Connection, tenant: str, since: datetime) -> Activity:
    """What the tenant's runs and attempts did on this shard since ``since``."""
    found = Activity()
    for row in await conn.fetch(SQL.overview_runs, tenant, since, math.log(LAG_BUCKET_GROWTH)):
        kind = row["grouping"]
        if kind == _STARTED_RUNS and row["started"] is not None:
            found.started[row["started"]] += row["runs"]
        elif kind == _SUCCEEDED_RUNS and row["succeeded"] is not None:
            found.succeeded[row["succeeded"]] += row["runs"]
        elif kind == _LAG and row["lag"] is not None:
            found.lag.append(LagBucket(row["priority"], row["lag"], row["runs"]))
    for row in await conn.fetch(SQL.overview_attempts, tenant, since):
        kind = row["grouping"]
        if kind == _STARTED_ATTEMPTS and row["started"] is not None:
            found.started[row["started"]] += row["attempts"]
        elif kind == _FAILED_ATTEMPTS:
            found.failed[row["finished"]] += row["failed"]
    return found


async def backlog(conn: Connection, tenant: str) -> list[ReadyCount]:
    rows = await conn.fetch(SQL.overview_backlog, tenant)
    return [
        ReadyCount(row["queue"], row["priority"], row["ready"], row["oldest_ready_at"])
        for row in rows
    ]


async def dead(conn: Connection, tenant: str) -> int:
    count: int = await conn.fetchval(SQL.overview_dead, tenant)
    return count


async def epoch_holder(conn: Connection) -> EpochHolder:
    row = await conn.fetchrow(SQL.shard_owner)
    if row is None:  # pragma: no cover - every migrated shard has its row
        return EpochHolder(0, None, None)
    return EpochHolder(row["epoch"], row["owner"], row["acquired_at"], row["last_pass_at"])


async def tenants(conn: Connection, limit: int) -> list[str]:
    return [row["tenant"] for row in await conn.fetch(SQL.shard_tenants, limit)]


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
    rows = await conn.fetch(SQL.job_table, tenant, contains, queue, show, sort, limit)
    return [
        JobRow(
            shard=shard,
            row=row,
            name=row["name"],
            paused=row["paused"],
            zone=row["zone"],
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


async def dead_jobs(conn: Connection, tenant: str, limit: int) -> list[str]:
    return [row["job"] for row in await conn.fetch(SQL.dead_jobs, tenant, limit)]


async def runs_by_ids(conn: Connection, shard: int, ids: Sequence[int]) -> list[Run]:
    if not ids:
        return []
    return [Run.from_record(shard, row) for row in await conn.fetch(SQL.runs_by_ids, list(ids))]
