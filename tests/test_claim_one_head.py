"""A claim while one head holds all the ready work (one tenant of one priority, no
limited job) takes the short statement; the moment a second head or a limited job has
ready work the claim merges them as before, and back again once it is gone. Each test
has a queue of its own, so what an earlier claim learnt of another queue's shape does
not decide which statement these claims start with."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import asyncpg

from tickwork.core.fairness import PriorityShares
from tickwork.core.records import Completion, Lease, Outcome
from tickwork.core.shards import ShardMap
from tickwork.store import database as db
from tickwork.store import leases

T0 = datetime(2026, 3, 15, 1, 0, tzinfo=UTC)

PRELOAD = """
INSERT INTO live_runs (tenant, job, queue, priority, state, origin, max_attempts,
                       retry_base, retry_max, timeout_seconds, due_at, ready_at,
                       created_at, updated_at, concurrency)
SELECT $1, $2, $3, $4, 'ready', 'api', 3, 1, 10, 3600, $6::timestamptz,
       $6::timestamptz - make_interval(secs => $5 - i + $8), $6, $6, $7
FROM generate_series(1, $5) AS i
"""


async def preload(
    conn: asyncpg.Connection,
    queue: str,
    tenant: str,
    count: int,
    *,
    job: str = "job",
    priority: int = 1,
    concurrency: int = 0,
    older_by: float = 0.0,
) -> None:
    await conn.execute(PRELOAD, tenant, job, queue, priority, count, T0, concurrency, older_by)


async def claim(
    conn: asyncpg.Connection, queue: str, batch: int, shares: PriorityShares
) -> list[Lease]:
    return await leases.claim(conn, 0, [queue], batch, "w", 300, T0, shares=shares)


async def finish(conn: asyncpg.Connection, granted: list[Lease]) -> None:
    await leases.complete(
        conn, 0, [Completion(g.id, g.fencing_token, Outcome.succeeded) for g in granted], T0
    )


async def test_one_tenant_gets_its_oldest_runs_and_a_second_tenant_its_turns_at_once(
    shard_map: ShardMap,
) -> None:
    conn = await db.connect(shard_map[0])
    try:
        shares = PriorityShares()
        await preload(conn, "one-head-a", "acme", 30)
        first = await claim(conn, "one-head-a", 10, shares)
        assert [g.tenant for g in first] == ["acme"] * 10
        ready_times = [g.ready_at for g in first]
        assert ready_times == sorted(ready_times)
        # The oldest ten of the thirty, in order.
        oldest = await conn.fetch(
            "SELECT id FROM runs WHERE queue = 'one-head-a' ORDER BY ready_at, id LIMIT 10"
        )
        assert [g.id for g in first] == [row["id"] for row in oldest]
        await finish(conn, first)
        # Another tenant's work appears: the very next claim takes turns between them.
        await preload(conn, "one-head-a", "globex", 30)
        second = await claim(conn, "one-head-a", 10, shares)
        assert sorted(g.tenant for g in second) == ["acme"] * 5 + ["globex"] * 5
        await finish(conn, second)
        # Once globex has nothing left, acme has the whole batch again.
        while True:
            granted = await claim(conn, "one-head-a", 10, shares)
            await finish(conn, granted)
            if not any(g.tenant == "globex" for g in granted):
                break
        await preload(conn, "one-head-a", "acme", 10)
        last = await claim(conn, "one-head-a", 10, shares)
        assert [g.tenant for g in last] == ["acme"] * 10
    finally:
        await conn.close()


async def test_a_second_priority_gets_its_share_at_once(shard_map: ShardMap) -> None:
    conn = await db.connect(shard_map[0])
    try:
        shares = PriorityShares()
        await preload(conn, "one-head-b", "acme", 200, priority=2)
        assert {g.priority for g in await claim(conn, "one-head-b", 20, shares)} == {2}
        await preload(conn, "one-head-b", "acme", 200, priority=0)
        granted = await claim(conn, "one-head-b", 20, shares)
        # Critical work has 70 % of the batch from the first claim it could be in.
        assert sum(g.priority == 0 for g in granted) >= 10
    finally:
        await conn.close()


async def test_a_limited_job_with_ready_work_is_merged_in_and_keeps_its_limit(
    shard_map: ShardMap,
) -> None:
    conn = await db.connect(shard_map[0])
    try:
        shares = PriorityShares()
        await preload(conn, "one-head-c", "acme", 50)
        assert len(await claim(conn, "one-head-c", 5, shares)) == 5
        # Older than every other run: a claim must lease one of them, and only one.
        await preload(conn, "one-head-c", "acme", 20, job="limited", concurrency=1, older_by=3600)
        granted = await claim(conn, "one-head-c", 10, shares)
        assert sum(g.job == "limited" for g in granted) == 1
        assert len(granted) == 10
        again = await claim(conn, "one-head-c", 10, shares)
        assert not any(g.job == "limited" for g in again)
    finally:
        await conn.close()


async def test_nothing_to_lease_is_an_empty_answer(shard_map: ShardMap) -> None:
    conn = await db.connect(shard_map[0])
    other = await db.connect(shard_map[0])
    try:
        shares = PriorityShares()
        assert await claim(conn, "one-head-d", 10, shares) == []
        await preload(conn, "one-head-d", "acme", 3)
        # Every ready run is locked by another transaction: skipped, not waited for.
        async with other.transaction():
            await other.execute("SELECT id FROM live_runs WHERE queue = 'one-head-d' FOR UPDATE")
            assert await claim(conn, "one-head-d", 10, shares) == []
        granted = await claim(conn, "one-head-d", 10, shares)
        assert len(granted) == 3
        await finish(conn, granted)
        assert await claim(conn, "one-head-d", 10, shares) == []
    finally:
        await other.close()
        await conn.close()


async def test_the_one_head_claim_reads_a_few_pages_whatever_the_backlog(
    shard_map: ShardMap,
) -> None:
    """The short statement probes two heads and the limited index, then reads the runs
    it leases: the 20 000 runs behind the head add nothing to a claim of one."""
    conn = await db.connect(shard_map[0])
    try:
        await preload(conn, "one-head-e", "acme", 20_000)
        await conn.execute("ANALYZE live_runs")
        async with conn.transaction():
            plan = json.loads(
                await conn.fetchval(
                    "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + leases.SQL.claim_one_head,
                    ["one-head-e"],
                    1,
                    "w",
                    T0,
                    300.0,
                    None,
                )
            )[0]["Plan"]
        assert plan["Actual Rows"] == 1
        assert int(plan["Shared Hit Blocks"]) + int(plan.get("Shared Read Blocks", 0)) < 60
    finally:
        await conn.close()


def _hashed(plan: object) -> list[str]:
    found: list[str] = []
    if isinstance(plan, dict):
        if plan.get("Strategy") == "Hashed":
            found.append(str(plan.get("CTE Name") or plan.get("Node Type")))
        for value in plan.values():
            found += _hashed(value)
    elif isinstance(plan, list):
        for value in plan:
            found += _hashed(value)
    return found


async def test_the_claims_generic_plans_group_by_sorting(shard_map: ShardMap) -> None:
    """A hashed aggregate sizes its table for the generic plan's guess (thousands of
    heads) when the executor starts: the claim connections group by sorting instead."""
    conn = await db.connect(shard_map[0], claims=True)
    try:
        for sql in (leases.SQL.claim, leases.SQL.claim_one_head, leases.SQL.claim_limited):
            statement = await conn.prepare(sql)
            types = ", ".join(t.name for t in statement.get_parameters())
            await conn.execute(f"PREPARE claim_plan ({types}) AS {sql}")
            arguments = (
                "'{default}', 10, 'w', NULL, 30, NULL, '{0,0,0}', '{0.7,0.25,0.05}', 1, '{}'"
            )
            count = len(statement.get_parameters())
            plan = json.loads(
                await conn.fetchval(
                    "EXPLAIN (FORMAT JSON) EXECUTE claim_plan ("
                    + ", ".join(arguments.split(", ")[:count])
                    + ")"
                )
            )
            await conn.execute("DEALLOCATE claim_plan")
            assert _hashed(plan) == [], plan
    finally:
        await conn.close()
