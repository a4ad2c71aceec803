"""A job's `concurrency` limit holds at claim time, also against concurrent claimers:
runs over the limit wait in `ready` and lose no attempt."""

from __future__ import annotations

import asyncio

from tickwork.core.clock import FrozenClock
from tickwork.core.records import Completion, Outcome
from tickwork.core.shards import ShardMap
from tickwork.core.spec import JobSpec
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.store import database as db
from tickwork.store import leases
from tickwork.store.database import Database

LEASED_OF_JOB = "SELECT count(*) FROM runs WHERE job = $1 AND state = 'leased'"


async def _enqueue(jobs: Jobs, name: str, count: int) -> int:
    for _ in range(count):
        run, _ = await jobs.enqueue("acme", name, EnqueueRequest(), "test")
    return run.shard


async def _limited_and_unlimited_on_one_shard(jobs: Jobs) -> tuple[str, str]:
    """Two jobs on one shard, so a single claim sees both: one with concurrency 1."""
    by_shard: dict[int, list[str]] = {}
    for name in (f"job-{n}" for n in range(40)):
        by_shard.setdefault(jobs.shard_of("acme", name), []).append(name)
    limited, unlimited = next(group for group in by_shard.values() if len(group) >= 2)[:2]
    await jobs.put("acme", limited, JobSpec(concurrency=1), "test")
    await jobs.put("acme", unlimited, JobSpec(), "test")
    return limited, unlimited


async def test_a_claim_takes_no_more_than_the_free_slots(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put("acme", "limited", JobSpec(concurrency=3), "test")
    shard = await _enqueue(jobs, "limited", 10)
    async with database.connection(shard) as conn:
        first = await leases.claim(conn, shard, ["default"], 10, "w1", 30, clock.now())
        assert len(first) == 3
        assert await leases.claim(conn, shard, ["default"], 10, "w2", 30, clock.now()) == []
        await leases.complete(
            conn,
            shard,
            [Completion(first[0].id, first[0].fencing_token, Outcome.succeeded)],
            clock.now(),
        )
        [next_one] = await leases.claim(conn, shard, ["default"], 10, "w2", 30, clock.now())
        assert next_one.attempt == 1
        waiting = await conn.fetchval(
            "SELECT count(*) FROM runs WHERE job = 'limited' AND state = 'ready' AND attempt = 0"
        )
        assert waiting == 6  # over the limit: still ready, no attempt spent


async def test_unlimited_runs_flow_past_a_job_at_its_limit(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    limited, unlimited = await _limited_and_unlimited_on_one_shard(jobs)
    await _enqueue(jobs, limited, 5)  # older: first in line
    shard = await _enqueue(jobs, unlimited, 5)
    async with database.connection(shard) as conn:
        granted = await leases.claim(conn, shard, ["default"], 10, "w", 30, clock.now())
    assert sorted(lease.job for lease in granted) == sorted([limited] + [unlimited] * 5)


async def test_a_job_at_its_limit_does_not_block_the_queue_behind_it(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    limited, unlimited = await _limited_and_unlimited_on_one_shard(jobs)
    await _enqueue(jobs, limited, 20)  # older: at the head of the queue
    shard = await _enqueue(jobs, unlimited, 3)
    async with database.connection(shard) as conn:
        taken = [
            await leases.claim(conn, shard, ["default"], 1, f"w{n}", 30, clock.now())
            for n in range(4)
        ]
    assert [lease.job for batch in taken for lease in batch] == [limited] + [unlimited] * 3


async def test_concurrent_claimers_never_exceed_the_limit(
    shard_map: ShardMap, database: Database, clock: FrozenClock
) -> None:
    limit, claimers, rounds = 2, 8, 15
    jobs = Jobs(database, clock)
    await jobs.put("acme", "limited", JobSpec(concurrency=limit), "test")
    shard = await _enqueue(jobs, "limited", limit * rounds + 5)
    connections = [await db.connect(shard_map[shard]) for _ in range(claimers)]
    try:
        for round_number in range(rounds):
            results = await asyncio.gather(
                *(
                    leases.claim(conn, shard, ["default"], 5, f"w{n}", 30, clock.now())
                    for n, conn in enumerate(connections)
                )
            )
            granted = [lease for result in results for lease in result]
            held = await connections[0].fetchval(LEASED_OF_JOB, "limited")
            assert len(granted) == held == limit, f"round {round_number}"
            await leases.complete(
                connections[0],
                shard,
                [Completion(g.id, g.fencing_token, Outcome.succeeded) for g in granted],
                clock.now(),
            )
        attempts = await connections[0].fetchval(
            "SELECT max(attempt) FROM runs WHERE job = 'limited'"
        )
        assert attempts == 1  # given-back claims cost no attempt
    finally:
        for conn in connections:
            await conn.close()
