"""Test data for bulk operations: runs made in bulk with set-based SQL."""

from __future__ import annotations

from datetime import UTC, datetime

from tickwork.store.database import Database

TENANT = "acme"
OTHER = "globex"
T1 = datetime(2026, 3, 14, 2, 0, tzinfo=UTC)
T2 = datetime(2026, 3, 14, 5, 0, tzinfo=UTC)


async def seed_dead(
    database: Database,
    tenant: str,
    job: str,
    count: int,
    died: datetime,
    message: str = "boom",
    attempts: int = 3,
) -> int:
    """``count`` dead runs of the job in its shard, made in one statement."""
    shard = database.shard_map.shard_of(tenant, job)
    async with database.connection(shard) as conn:
        await conn.execute(
            """
            INSERT INTO finished_runs (id, tenant, job, queue, priority, state, origin,
                attempt, max_attempts, retry_base, retry_max, timeout_seconds, due_at,
                ready_at, last_error, created_at, updated_at, finished_at)
            SELECT nextval('run_ids'), $1, $2, 'default', 1, 'dead', 'api', $3, 1, 1, 60,
                   60, $4, $4, jsonb_build_object('message', $5::text), $4, $4, $4
            FROM generate_series(1, $6)
            """,
            tenant,
            job,
            attempts,
            died,
            message,
            count,
        )
    return shard


async def seed_scheduled(
    database: Database, tenant: str, job: str, count: int, due: datetime, created: datetime
) -> None:
    shard = database.shard_map.shard_of(tenant, job)
    async with database.connection(shard) as conn:
        await conn.execute(
            """
            INSERT INTO live_runs (tenant, job, queue, priority, state, origin,
                max_attempts, retry_base, retry_max, timeout_seconds, due_at, ready_at,
                created_at, updated_at)
            SELECT $1, $2, 'default', 1, 'scheduled', 'api', 1, 1, 60, 60, $3, $3, $4, $4
            FROM generate_series(1, $5)
            """,
            tenant,
            job,
            due,
            created,
            count,
        )


async def states(database: Database, tenant: str) -> dict[str, int]:
    """How many of the tenant's runs are in each state, over every shard."""
    found: dict[str, int] = {}
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            for row in await conn.fetch(
                "SELECT state, count(*) AS n FROM runs WHERE tenant = $1 GROUP BY state", tenant
            ):
                found[row["state"]] = found.get(row["state"], 0) + row["n"]
    return found
