"""What the dashboard's overview shows of a tenant, merged across shards: attempts per
minute, the ready backlog per queue and priority, start lag percentiles per priority,
the DLQ size; and, for everyone, which scheduler holds each shard.

Each shard is read in its own connection, concurrently; counts add up across shards,
and start lag percentiles come from merged histograms (10 % wide buckets), because
percentiles of shards cannot be combined.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, TypeVar

from tickwork.core.clock import Clock, DatabaseClock
from tickwork.core.spec import Priority
from tickwork.engine.jobs import database_now
from tickwork.store import overview as store
from tickwork.store.database import Connection, Database

T = TypeVar("T")

WINDOW_MINUTES: Final = 60
TENANT_LIMIT: Final = 1000


@dataclass(frozen=True, slots=True)
class Minute:
    at: datetime  # the start of the minute
    started: int  # attempts leased
    succeeded: int
    failed: int  # attempts failed or whose lease expired


@dataclass(frozen=True, slots=True)
class Backlog:
    queue: str
    priority: Priority
    ready: int
    oldest_ready_at: datetime
    oldest_age_seconds: float


@dataclass(frozen=True, slots=True)
class StartLag:
    priority: Priority
    leases: int
    p50_seconds: float | None
    p99_seconds: float | None


@dataclass(frozen=True, slots=True)
class ShardStatus:
    shard: int
    # None: no scheduler has taken the shard yet.
    owner: str | None
    since: datetime | None
    epoch: int
    # The end of the owner's last pass over the shard; None before its first one.
    last_pass_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Overview:
    tenant: str
    now: datetime
    since: datetime
    minutes: list[Minute]  # one per minute of the window, oldest first
    backlog: list[Backlog]
    start_lag: list[StartLag]  # one per priority
    dead: int
    shards: list[ShardStatus]

    @property
    def ready(self) -> int:
        return sum(item.ready for item in self.backlog)


@dataclass(frozen=True, slots=True)
class _ShardPart:
    activity: store.Activity
    backlog: list[store.ReadyCount]
    dead: int


async def current_time(database: Database, clock: Clock | None = None) -> datetime:
    """Now, by the database clock (or ``clock``): what the dashboard's times count from."""
    async with database.connection(0) as conn:
        return await database_now(conn, clock or DatabaseClock())


async def read(database: Database, tenant: str, clock: Clock | None = None) -> Overview:
    """The tenant's overview over the last hour, as of the database clock (or ``clock``)."""
    now = await current_time(database, clock)
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=WINDOW_MINUTES - 1)

    async def shard_part(shard: int) -> _ShardPart:
        # Each read in a connection of its own: the database works on them side by side.
        async def on(read: Callable[[Connection], Awaitable[T]]) -> T:
            async with database.connection(shard) as conn:
                return await read(conn)

        activity, backlog, dead = await asyncio.gather(
            on(lambda conn: store.activity(conn, tenant, start)),
            on(lambda conn: store.backlog(conn, tenant)),
            on(lambda conn: store.dead(conn, tenant)),
        )
        return _ShardPart(activity=activity, backlog=backlog, dead=dead)

    parts, shards = await asyncio.gather(
        asyncio.gather(*(shard_part(n) for n in range(database.shard_count))),
        shard_owners(database),
    )
    return Overview(
        tenant=tenant,
        now=now,
        since=start,
        minutes=_minutes(start, [part.activity for part in parts]),
        backlog=_backlog(now, [b for part in parts for b in part.backlog]),
        start_lag=_start_lag([bucket for part in parts for bucket in part.activity.lag]),
        dead=sum(part.dead for part in parts),
        shards=shards,
    )


async def shard_owners(database: Database) -> list[ShardStatus]:
    """Who schedules each shard: the holder of its epoch (whose writes count), since
    when, and when its last pass ended."""

    async def one(shard: int) -> ShardStatus:
        async with database.connection(shard) as conn:
            holder = await store.epoch_holder(conn)
        return ShardStatus(
            shard, holder.owner or None, holder.acquired_at, holder.epoch, holder.last_pass_at
        )

    return list(await asyncio.gather(*(one(n) for n in range(database.shard_count))))


async def tenants(database: Database, limit: int = TENANT_LIMIT) -> list[str]:
    """Tenants that have jobs, by name (for an admin choosing whom to act for)."""

    async def one(shard: int) -> list[str]:
        async with database.connection(shard) as conn:
            return await store.tenants(conn, limit)

    found = await asyncio.gather(*(one(n) for n in range(database.shard_count)))
    return sorted({tenant for names in found for tenant in names})[:limit]


async def dead_jobs(database: Database, tenant: str, limit: int = 200) -> list[str]:
    """Names of the tenant's jobs that have runs in the DLQ."""

    async def one(shard: int) -> list[str]:
        async with database.connection(shard) as conn:
            return await store.dead_jobs(conn, tenant, limit)

    found = await asyncio.gather(*(one(n) for n in range(database.shard_count)))
    return sorted({name for names in found for name in names})[:limit]


def _minutes(start: datetime, parts: list[store.Activity]) -> list[Minute]:
    started: Counter[int] = Counter()
    succeeded: Counter[int] = Counter()
    failed: Counter[int] = Counter()
    for part in parts:
        started.update(part.started)
        succeeded.update(part.succeeded)
        failed.update(part.failed)
    return [
        Minute(start + timedelta(minutes=i), started[i], succeeded[i], failed[i])
        for i in range(WINDOW_MINUTES)
    ]


def _backlog(now: datetime, counts: list[store.ReadyCount]) -> list[Backlog]:
    merged: dict[tuple[str, int], tuple[int, datetime]] = {}
    for item in counts:
        key = (item.queue, item.priority)
        ready, oldest = merged.get(key, (0, item.oldest_ready_at))
        merged[key] = (ready + item.ready, min(oldest, item.oldest_ready_at))
    return [
        Backlog(
            queue=queue,
            priority=Priority.from_rank(rank),
            ready=ready,
            oldest_ready_at=oldest,
            oldest_age_seconds=max(0.0, (now - oldest).total_seconds()),
        )
        for (queue, rank), (ready, oldest) in sorted(merged.items())
    ]


def _percentile(histogram: Counter[int], fraction: float) -> float | None:
    """The geometric middle of the bucket holding the ``fraction`` quantile."""
    total = sum(histogram.values())
    if not total:
        return None
    rank = max(1, math.ceil(fraction * total))
    seen = 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= rank:
            return float(store.LAG_BUCKET_BASE * store.LAG_BUCKET_GROWTH ** (bucket + 0.5))
    raise AssertionError("unreachable")  # pragma: no cover


def _start_lag(buckets: list[store.LagBucket]) -> list[StartLag]:
    histograms: dict[int, Counter[int]] = {p.rank: Counter() for p in Priority}
    for item in buckets:
        histograms[item.priority][max(0, item.bucket)] += item.leases
    return [
        StartLag(
            priority=priority,
            leases=sum(histograms[priority.rank].values()),
            p50_seconds=_percentile(histograms[priority.rank], 0.50),
            p99_seconds=_percentile(histograms[priority.rank], 0.99),
        )
        for priority in Priority
    ]
