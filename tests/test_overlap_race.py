"""Overlap policies under races, on a real PostgreSQL: fires decided by the scheduler's
pass while a second due flip runs on the same shard at the same instant, and while
workers lease, heartbeat, fail and complete the jobs' runs; leases expire and are
reaped. Time is the injected ``FrozenClock``; the order of everything else is left to
the database. After every step, and in the middle of each, the rules of
docs/scheduling.md ("Overlapping runs") hold in every committed state:

- Forbid: never two runs of the job ready, leased or waiting to retry at once, and every
  fire it skipped is counted in the job's overlapSkipped;
- Replace: at most one run of the job ready, leased or waiting to retry that was not
  asked to stop;
- Allow: every fire runs, none is skipped or cancelled;
- every fire whose time has come is decided: none is left waiting.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

import pytest

from tickwork.core.clock import FrozenClock
from tickwork.core.errors import TickworkError
from tickwork.core.records import Lease, Outcome
from tickwork.core.spec import JobSpec, MissedRunPolicy, OverlapPolicy, Retry, Schedule
from tickwork.engine import materialiser
from tickwork.engine.dispatch import CompleteItem, Dispatcher, HeartbeatItem
from tickwork.engine.jobs import Jobs
from tickwork.engine.scheduler import Scheduler
from tickwork.store import sweeps
from tickwork.store.database import Database

TENANT = "acme"
# Three jobs of each policy, spread over the shards.
JOBS = {
    f"{policy.value.lower()}-{n}": policy
    for policy in (OverlapPolicy.Forbid, OverlapPolicy.Replace, OverlapPolicy.Allow)
    for n in range(3)
}
STEPS = 24

RUNNING = """
SELECT job,
       count(*) AS running,
       count(*) FILTER (WHERE NOT cancel_requested) AS not_asked,
       (SELECT count(*) FROM live_runs AS w
        WHERE w.tenant = $1 AND w.job = r.job AND w.state = 'scheduled'
          AND w.ready_at < $2::timestamptz) AS undecided
FROM live_runs AS r
WHERE tenant = $1 AND state IN ('ready', 'leased', 'retry_wait')
GROUP BY job
"""
SKIPPED = """
SELECT (SELECT overlap_skipped FROM definitions WHERE tenant = $1 AND name = $2) AS counted,
       (SELECT count(*) FROM finished_runs
        WHERE tenant = $1 AND job = $2 AND state = 'skipped'
          AND last_error ->> 'reason' = $3) AS skipped,
       (SELECT count(*) FROM finished_runs
        WHERE tenant = $1 AND job = $2 AND last_error ->> 'reason' LIKE 'overlap-%') AS ended
"""


def spec(policy: OverlapPolicy) -> JobSpec:
    return JobSpec(
        # run_all: a step longer than a minute leaves two fires of a job due at once.
        schedule=Schedule(
            cron="* * * * *", jitter_seconds=0, missed_run_policy=MissedRunPolicy.run_all
        ),
        overlap_policy=policy,
        retry=Retry(max_attempts=3, base_seconds=1, max_seconds=1),
    )


async def check(database: Database, now: datetime, *, settled: bool) -> None:
    """The rules, in one committed state of every shard (``settled``: no pass is in
    flight, so every fire whose time has come must be decided)."""
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            for row in await conn.fetch(RUNNING, TENANT, now):
                job = row["job"]
                if JOBS[job] is OverlapPolicy.Forbid:
                    assert row["running"] <= 1, (job, dict(row))
                if JOBS[job] is OverlapPolicy.Replace:
                    assert row["not_asked"] <= 1, (job, dict(row))
                if settled and JOBS[job] is not OverlapPolicy.Allow:
                    assert row["undecided"] == 0, (job, dict(row))


async def checker(database: Database, now: datetime) -> None:
    """The rules, checked a few times while a step is in flight."""
    for _ in range(3):
        await check(database, now, settled=False)
        await asyncio.sleep(0)


async def worker(dispatcher: Dispatcher, held: list[Lease], rng: random.Random) -> None:
    """One round of a worker: lease a few runs, heartbeat some of those it holds, fail
    or complete others, keep the rest."""
    held.extend(
        await dispatcher.lease(
            ["default"], limit=rng.randint(1, 3), worker_id=f"w{rng.random()}", lease_seconds=45
        )
    )
    rng.shuffle(held)
    keep = rng.randint(0, len(held))
    done, held[:] = held[keep:], held[:keep]
    if held:
        await dispatcher.heartbeat([HeartbeatItem(h.run_id, h.fencing_token, 45) for h in held])
    if done:
        items = [
            CompleteItem(
                lease.run_id,
                lease.fencing_token,
                outcome := rng.choice((Outcome.succeeded, Outcome.failed)),
                None if outcome is Outcome.succeeded else {"message": "boom"},
                True,
            )
            for lease in done
        ]
        for answer in await dispatcher.complete(items):
            # A run replaced, reaped or cancelled meanwhile answers a stale lease.
            assert not isinstance(answer, Exception) or isinstance(answer, TickworkError)


async def second_flip(database: Database, now: datetime) -> None:
    """The due flip of every shard, as a second scheduler pass racing the first would
    run it (without its epoch: nothing but the job locks keeps the two apart)."""
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            await sweeps.promote_due(conn, now=now)


async def test_fires_race_running_runs_and_the_rules_hold(database: Database) -> None:
    clock = FrozenClock(datetime(2026, 3, 15, 1, 0, 10, tzinfo=UTC))
    jobs = Jobs(database, clock)
    for name, policy in JOBS.items():
        await jobs.put(TENANT, name, spec(policy), "test")
    scheduler = Scheduler(database, clock=clock)
    dispatcher = Dispatcher(database, clock, random.Random(3))
    rng = random.Random(11)
    held: list[list[Lease]] = [[], []]
    await scheduler.pass_once()
    for _ in range(STEPS):
        clock.advance(rng.choice((20, 30, 40, 90, 150)))
        now = clock.now()
        await asyncio.gather(
            scheduler.pass_once(),
            second_flip(database, now),
            second_flip(database, now),
            worker(dispatcher, held[0], rng),
            worker(dispatcher, held[1], rng),
            checker(database, now),
        )
        await scheduler.pass_once()
        assert not scheduler.failing()  # no pass failed (a deadlock, a refused write)
        await check(database, now, settled=True)

    totals: dict[str, tuple[int, int, int]] = {}
    for name, policy in JOBS.items():
        shard = database.shard_map.shard_of(TENANT, name)
        reason = sweeps.OVERLAP_FORBIDDEN
        async with database.connection(shard) as conn:
            row = await conn.fetchrow(SKIPPED, TENANT, name, reason)
        assert row is not None
        totals[name] = (row["counted"], row["skipped"], row["ended"])
        # Every fire Forbid skipped is counted, and nothing else is.
        assert row["counted"] == row["skipped"], (name, dict(row))
        if policy is OverlapPolicy.Allow:
            assert row["ended"] == 0, dict(row)
    # The race did happen: fires were skipped and replaced.
    assert sum(totals[f"forbid-{n}"][1] for n in range(3)) > 0, totals
    assert sum(totals[f"replace-{n}"][2] for n in range(3)) > 0, totals


WAITING_ON_A_JOB_LOCK = """
SELECT count(*) > 0 FROM pg_locks
WHERE locktype = 'advisory' AND NOT granted
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


@pytest.mark.parametrize("policy", [OverlapPolicy.Forbid, OverlapPolicy.Replace])
async def test_a_flip_deciding_a_fire_holds_back_another_flip_of_the_job_until_it_commits(
    database: Database, policy: OverlapPolicy
) -> None:
    """The interleaving the job lock exists for: one flip has started the 01:01 fire and
    not committed yet when another flip finds the 01:02 fire due. The second waits, then
    sees the first fire running: Forbid skips the second fire, Replace stops the first."""
    clock = FrozenClock(datetime(2026, 3, 15, 1, 0, 10, tzinfo=UTC))
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "job", spec(policy), "test")
    shard = jobs.shard_of(TENANT, "job")
    first_fire, second_fire = (
        clock.now().replace(minute=1, second=0),
        clock.now().replace(minute=2, second=0),
    )
    async with database.connection(shard) as one, database.connection(shard) as two:
        await materialiser.materialise_all(one, first_fire)  # 01:01 and 01:02, scheduled
        async with one.transaction():
            decided, _ = await sweeps.fire_overlapping(one, 100, first_fire)
            assert len(decided.started) == 1
            second = asyncio.create_task(sweeps.promote_due(two, now=second_fire))
            # Until the second flip has decided or waits (not a while: no sleep).
            for _ in range(10_000):
                if second.done() or await one.fetchval(WAITING_ON_A_JOB_LOCK):
                    break
                await asyncio.sleep(0)
        promoted = await second
        rows = await one.fetch(
            "SELECT due_at, state, cancel_requested FROM runs WHERE job = 'job' ORDER BY due_at"
        )
    found = [(r["due_at"].minute, r["state"]) for r in rows]
    if policy is OverlapPolicy.Forbid:
        assert found == [(1, "ready"), (2, "skipped")]
        assert len(promoted.overlap.skipped) == 1
    else:
        assert found == [(1, "cancelled"), (2, "ready")]
        assert len(promoted.overlap.replaced) == 1
