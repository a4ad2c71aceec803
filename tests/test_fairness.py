"""Claims are fair: priorities share by weight (70/25/5, work-conserving), tenants take
turns within a priority and a tenant holding many leases yields, a job's concurrency
limit holds against 16 concurrent claimers, and a job at its limit with a huge backlog
costs a claim nothing.

Runs are preloaded with one INSERT per test (setup), then claimed through the store as
dispatchers do."""

from __future__ import annotations

import asyncio
import collections
import json
import statistics
from datetime import UTC, datetime, timedelta

import asyncpg

from tickwork.core.fairness import PriorityShares, parse_weights
from tickwork.core.records import Completion, Lease, Outcome
from tickwork.core.shards import ShardMap
from tickwork.store import database as db
from tickwork.store import leases

T0 = datetime(2026, 3, 15, 1, 0, tzinfo=UTC)
QUEUES = ["default"]
CRITICAL, DEFAULT, BULK = 0, 1, 2

PRELOAD = """
INSERT INTO live_runs (tenant, job, queue, priority, state, origin, max_attempts,
                       retry_base, retry_max, timeout_seconds, due_at, ready_at,
                       created_at, updated_at, concurrency)
SELECT $1, $2, 'default', $3, 'ready', 'api', 3, 1, 10, 3600, $5::timestamptz,
       $5::timestamptz - make_interval(secs => $4 - i), $5, $5, $6
FROM generate_series(1, $4) AS i
"""


READY_AGAIN = "UPDATE live_runs SET state = 'ready', attempt = 0 WHERE job = 'other'"


async def preload(
    conn: asyncpg.Connection,
    tenant: str,
    count: int,
    *,
    priority: int = DEFAULT,
    job: str = "job",
    concurrency: int = 0,
    ready_at: datetime = T0,
) -> None:
    await conn.execute(PRELOAD, tenant, job, priority, count, ready_at, concurrency)


async def claim(
    conn: asyncpg.Connection,
    batch: int,
    shares: PriorityShares,
    now: datetime = T0,
    worker: str = "w",
) -> list[Lease]:
    return await leases.claim(conn, 0, QUEUES, batch, worker, 300, now, shares=shares)


async def finish(conn: asyncpg.Connection, granted: list[Lease], now: datetime = T0) -> None:
    await leases.complete(
        conn, 0, [Completion(g.id, g.fencing_token, Outcome.succeeded) for g in granted], now
    )


async def test_all_priorities_backlogged_split_70_25_5_over_10000_claimed_runs(
    shard_map: ShardMap,
) -> None:
    conn = await db.connect(shard_map[0])
    try:
        for priority in (CRITICAL, DEFAULT, BULK):
            await preload(conn, "acme", 10_000, priority=priority)
        shares = PriorityShares()
        taken: collections.Counter[int] = collections.Counter()
        while sum(taken.values()) < 10_000:
            granted = await claim(conn, 100, shares)
            taken.update(g.priority for g in granted)
            await finish(conn, granted)
        # One run at a time follows the same split.
        singles: collections.Counter[int] = collections.Counter()
        for _ in range(200):
            [one] = await claim(conn, 1, shares)
            singles[one.priority] += 1
            await finish(conn, [one])
    finally:
        await conn.close()
    total = sum(taken.values())
    for priority, share in ((CRITICAL, 0.70), (DEFAULT, 0.25), (BULK, 0.05)):
        assert abs(taken[priority] / total - share) <= 0.05 * share, taken
        assert abs(singles[priority] / 200 - share) <= 0.05 * share + 0.01, singles


async def test_an_idle_priority_share_goes_to_the_others(shard_map: ShardMap) -> None:
    conn = await db.connect(shard_map[0])
    try:
        await preload(conn, "acme", 3_000, priority=DEFAULT)
        await preload(conn, "acme", 3_000, priority=BULK)
        shares = PriorityShares(parse_weights("70/25/5"))
        taken: collections.Counter[int] = collections.Counter()
        for _ in range(30):
            granted = await claim(conn, 100, shares)
            assert len(granted) == 100  # work-conserving: every slot is used
            taken.update(g.priority for g in granted)
        # Critical work arriving after an idle spell gets its 70 %, not a burst.
        await preload(conn, "acme", 1_000, priority=CRITICAL)
        after = collections.Counter(g.priority for g in await claim(conn, 100, shares))
    finally:
        await conn.close()
    assert abs(taken[DEFAULT] / 3000 - 25 / 30) <= 0.02, taken
    assert 65 <= after[CRITICAL] <= 75, after


async def test_tenants_take_turns_whatever_their_backlogs(shard_map: ShardMap) -> None:
    backlogs = {"a": 2_000, "b": 500, "c": 60, "d": 12, "e": 3}
    conn = await db.connect(shard_map[0])
    try:
        # The biggest backlog is also the oldest: strict age order would serve only "a".
        for n, (tenant, count) in enumerate(backlogs.items()):
            await preload(conn, tenant, count, ready_at=T0 + timedelta(seconds=n))
        shares = PriorityShares()
        served: collections.Counter[str] = collections.Counter()
        rounds = []
        for _ in range(10):
            # The runs stay leased (a tenant's leases count against its turns).
            served.update(g.tenant for g in await claim(conn, 10, shares))
            rounds.append(dict(served))
    finally:
        await conn.close()
    # After 100 runs the shares are the water level: each tenant has min(backlog, level).
    level = 100
    while sum(min(count, level) for count in backlogs.values()) > 100:
        level -= 1
    for tenant, count in backlogs.items():
        assert abs(served[tenant] - min(count, level)) <= 1, (rounds, level)
    # Already the first claim of 10 served all five tenants.
    assert set(rounds[0]) == set(backlogs), rounds[0]


async def test_a_tenant_holding_many_leases_yields_to_the_others(shard_map: ShardMap) -> None:
    conn = await db.connect(shard_map[0])
    try:
        await preload(conn, "hog", 1_000, ready_at=T0 - timedelta(hours=1))
        shares = PriorityShares()
        held = []
        for _ in range(5):
            held += await claim(conn, 10, shares)  # 50 slow runs still running
        assert {g.tenant for g in held} == {"hog"}
        await preload(conn, "small", 20)
        first = await claim(conn, 10, shares)
        second = await claim(conn, 20, shares)
    finally:
        await conn.close()
    assert [g.tenant for g in first] == ["small"] * 10
    # The small tenant's remaining ten come first; only then does the hog get slots.
    assert collections.Counter(g.tenant for g in second) == {"small": 10, "hog": 10}


async def test_16_concurrent_claimers_never_exceed_a_jobs_limit(shard_map: ShardMap) -> None:
    limit = 3
    setup = await db.connect(shard_map[0])
    await preload(setup, "acme", 150, job="limited", concurrency=limit)
    await preload(setup, "acme", 150, job="free")
    # A claim takes the job up to its limit and not one run past it, whatever its size.
    first = await claim(setup, 10, PriorityShares(), worker="first")
    second = await claim(setup, 10, PriorityShares(), worker="second")
    assert sum(g.job == "limited" for g in first) == limit
    assert not [g for g in second if g.job == "limited"]
    await finish(setup, first + second)
    limited_done = limit
    held: set[int] = set()
    peak = 0

    async def claimer(number: int) -> None:
        nonlocal peak, limited_done
        conn = await db.connect(shard_map[0])
        shares = PriorityShares()
        try:
            while limited_done < 150:
                granted = await claim(conn, 1 + number % 4, shares, worker=f"w{number}")
                mine = [g for g in granted if g.job == "limited"]
                held.update(g.id for g in mine)
                peak = max(peak, len(held))
                assert len(held) <= limit, held
                await asyncio.sleep(0)  # let the others claim while these are held
                await finish(conn, granted)
                held.difference_update(g.id for g in mine)
                limited_done += len(mine)
                if not granted:
                    await asyncio.sleep(0.001)
        finally:
            await conn.close()

    try:
        await asyncio.wait_for(asyncio.gather(*(claimer(n) for n in range(16))), 60)
        over = await setup.fetchval(
            "SELECT count(*) FROM runs WHERE job = 'limited' AND state <> 'succeeded'"
        )
        attempts = await setup.fetchval("SELECT max(attempt) FROM runs WHERE job = 'limited'")
    finally:
        await setup.close()
    assert 1 <= peak <= limit  # how close the race comes to the limit is the scheduler's to decide
    assert over == 0 and attempts == 1  # runs given back lost no attempt


async def test_a_job_at_its_limit_with_a_huge_backlog_costs_a_claim_nothing(
    shard_map: ShardMap,
) -> None:
    conn = await db.connect(shard_map[0])
    try:
        await preload(conn, "acme", 1, job="other", ready_at=T0)
        shares = PriorityShares()
        sql = leases.SQL.claim_limited
        # The blocked job's bucket as lock_flow names it: its runs are considered.
        buckets = ["acme\x1ejob/blocked"]
        passes = [0.0] * 3
        arguments = (QUEUES, 10, "w", T0, 300.0, None, passes, list(shares.weights), 1, buckets)

        async def buffers_of_a_claim() -> int:
            plan = json.loads(
                await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *arguments)
            )[0]["Plan"]
            # The claim leased the other job's run: make it ready again for the next one.
            await conn.execute(READY_AGAIN)
            return int(plan["Shared Hit Blocks"]) + int(plan.get("Shared Read Blocks", 0))

        small = await buffers_of_a_claim()
        await preload(
            conn, "acme", 20_000, job="blocked", concurrency=1, ready_at=T0 - timedelta(1)
        )
        [blocker] = await claim(conn, 1, shares)
        assert blocker.job == "blocked"
        await conn.execute("ANALYZE live_runs")
        big = await buffers_of_a_claim()
        timings = []
        for _ in range(5):
            started = asyncio.get_running_loop().time()
            granted = await claim(conn, 10, shares)
            timings.append(asyncio.get_running_loop().time() - started)
            assert [g.job for g in granted] == ["other"]
            await conn.execute(READY_AGAIN)
    finally:
        await conn.close()
    # 20 000 waiting runs of the blocked job add a few index pages, not thousands.
    assert big <= small + 50, (small, big)
    assert statistics.median(timings) < 0.05
