"""Epoch fencing of scheduler writes: a new owner moves the shard's epoch on before its
first write, and every scheduler transaction (materialise, due flip and deadline skip,
reaper, retention) checks it first, so a deposed owner writes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest
from polling import eventually

from tickwork.coordination.ownership import Fixed
from tickwork.core.clock import FrozenClock
from tickwork.core.shards import ShardMap
from tickwork.core.spec import JobSpec, Schedule
from tickwork.engine import materialiser
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.metrics import Metrics
from tickwork.engine.scheduler import Scheduler
from tickwork.store import database as db
from tickwork.store import epochs, leases, retention, sweeps
from tickwork.store.database import Database

TENANT = "acme"
ACTOR = "test"


def every_minute() -> JobSpec:
    return JobSpec(schedule=Schedule(cron="* * * * *", jitter_seconds=0))


async def snapshot(database: Database, shard: int) -> list[tuple[object, ...]]:
    """Everything a scheduler write could change on the shard."""
    async with database.connection(shard) as conn:
        runs = await conn.fetch("SELECT id, state, ready_at, attempt FROM runs ORDER BY id")
        due = await conn.fetch("SELECT name, next_due_at FROM definitions ORDER BY name")
        tried = await conn.fetch("SELECT run_id, outcome FROM run_attempts ORDER BY run_id")
    return [tuple(r) for r in [*runs, *due, *tried]]


@pytest.fixture
async def work(database: Database, clock: FrozenClock) -> AsyncIterator[tuple[Jobs, int]]:
    """A shard with one of everything a scheduler does: a cron job due, a delayed run
    due, and a lease that expired."""
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "minutely", every_minute(), ACTOR)
    shard = jobs.shard_of(TENANT, "minutely")
    name = next(f"n{n}" for n in range(100) if jobs.shard_of(TENANT, f"n{n}") == shard)
    await jobs.put(TENANT, name, JobSpec(), ACTOR)
    await jobs.enqueue(TENANT, name, EnqueueRequest(delay_seconds=30), ACTOR)
    await jobs.enqueue(TENANT, name, EnqueueRequest(), ACTOR)
    async with database.connection(shard) as conn:
        [lease] = await leases.claim(conn, shard, ["default"], 1, "w", 10, clock.now())
        assert lease.job == name
    clock.advance(70)  # the cron time and the delayed run are due; the lease expired
    yield jobs, shard


async def test_a_deposed_owner_writes_nothing_and_counts_the_refusal(
    database: Database, clock: FrozenClock, work: tuple[Jobs, int]
) -> None:
    _, shard = work
    old = Scheduler(database, ownership=Fixed([shard], "old"), clock=clock, metrics=Metrics())
    new = Scheduler(database, ownership=Fixed([shard], "new"), clock=clock)
    old.test_signals.init()
    async with database.connection(shard) as conn:
        await epochs.take(conn, "old", clock.now())  # what old's first pass would do...
    assert await old.pass_once() != []
    clock.advance(70)  # ...and more work falls due
    [took] = await new.pass_once()
    assert took.took_over and took.epoch == (await old_epoch(database, shard)) and took.changed
    clock.advance(70)
    before = await snapshot(database, shard)

    assert await old.pass_once() == []

    refusal = await old.test_signals.refused.wait(1)
    assert (refusal.shard, refusal.step, refusal.owner) == (shard, "materialise", "new")
    assert refusal.current == refusal.epoch + 1
    assert old.metrics is not None
    assert old.metrics.epoch_conflicts.labels("materialise")._value.get() == 1
    assert await snapshot(database, shard) == before
    # Fixed ownership (one replica, no leases) takes the shard back under a new term.
    [again] = await old.pass_once()
    assert again.took_over and again.epoch == refusal.current + 1


async def old_epoch(database: Database, shard: int) -> int:
    async with database.connection(shard) as conn:
        return (await epochs.current(conn)).epoch


async def test_every_scheduler_transaction_checks_the_epoch(
    database: Database, clock: FrozenClock, work: tuple[Jobs, int]
) -> None:
    _, shard = work
    async with database.connection(shard) as conn:
        stale = epochs.Fence((await epochs.take(conn, "old")).epoch)
        await epochs.take(conn, "new")
        before = await snapshot(database, shard)
        now = clock.now()
        for step in (
            materialiser.materialise(conn, now, fence=stale),
            sweeps.promote_due(conn, now=now, fence=stale),
            sweeps.reap(conn, now=now, fence=stale),
            retention.ensure_all_partitions(conn, now + timedelta(days=9), fence=stale),
            retention.drop_expired(conn, now + timedelta(days=90), fence=stale),
            retention.forget_old_audit(conn, now + timedelta(days=900), fence=stale),
            epochs.record_pass(conn, stale, now),
        ):
            with pytest.raises(epochs.Deposed) as refused:
                await step
            assert (refused.value.epoch, refused.value.owner) == (stale.epoch, "new")
        assert await snapshot(database, shard) == before
        current = epochs.Fence((await epochs.current(conn)).epoch)
        assert (await sweeps.reap(conn, now=now, fence=current)).retried == 1
        assert (await sweeps.promote_due(conn, now=now, fence=current)).ready == 1
        assert (await materialiser.materialise(conn, now, fence=current)).runs > 0
        assert await epochs.record_pass(conn, current, now) == now


async def blocked(conn: asyncpg.Connection, pid: int) -> bool:
    state = await conn.fetchval("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", pid)
    return bool(state == "Lock")


async def test_a_takeover_waits_for_the_old_epochs_transaction_in_flight(
    shard_map: ShardMap,
) -> None:
    import asyncio

    shard = shard_map[0]
    old, new, probe = [await db.connect(shard) for _ in range(3)]
    try:
        fence = epochs.Fence((await epochs.take(old, "old")).epoch)
        writing = old.transaction()
        await writing.start()
        await epochs.check(old, fence)
        taking = asyncio.create_task(epochs.take(new, "new", wait_seconds=30))
        pid = new.get_server_pid()
        await eventually(
            lambda: blocked(probe, pid), every=0.01, what="the takeover waiting for the lock"
        )
        assert not taking.done()
        await old.execute("UPDATE definitions SET paused = paused")  # the old epoch's write
        await writing.commit()  # lands before the new epoch begins
        holder = await asyncio.wait_for(taking, 5)
        assert holder.epoch == fence.epoch + 1
        async with old.transaction():
            with pytest.raises(epochs.Deposed):
                await epochs.check(old, fence)
    finally:
        for conn in (old, new, probe):
            await conn.close()


async def test_a_takeover_ends_a_session_stalled_in_the_old_epoch(shard_map: ShardMap) -> None:
    shard = shard_map[0]
    old, new = await db.connect(shard), await db.connect(shard)
    try:
        fence = epochs.Fence((await epochs.take(old, "old")).epoch)
        stalled = old.transaction()
        await stalled.start()
        await epochs.check(old, fence)  # ... and its process is paused here
        holder = await epochs.take(new, "new", wait_seconds=0.2)
        assert holder.epoch == fence.epoch + 1
        gone = "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $1"
        assert await new.fetchval(gone, old.get_server_pid())
        # The client learns it at its next statement (how depends on when the server's
        # goodbye arrived: asyncpg reports it as one of these).
        broken = (
            asyncpg.PostgresConnectionError,
            asyncpg.InterfaceError,
            asyncpg.InternalClientError,
            OSError,
        )
        with pytest.raises(broken):
            await old.execute("UPDATE definitions SET paused = paused")
    finally:
        new.terminate() if new.is_closed() else await new.close()
        old.terminate()


async def test_the_server_ends_a_fenced_transaction_that_stalls(shard_map: ShardMap) -> None:
    import asyncio

    conn = await db.connect(shard_map[0])
    try:
        fence = epochs.Fence((await epochs.take(conn, "me")).epoch, stall_seconds=0.2)
        stalled = conn.transaction()
        await stalled.start()
        await epochs.check(conn, fence)
        await asyncio.sleep(0.6)  # about wall-clock behaviour: the server's timeout
        with pytest.raises((asyncpg.PostgresConnectionError, asyncpg.InterfaceError, OSError)):
            await conn.execute("SELECT 1")
    finally:
        conn.terminate()


async def test_a_new_owner_reaps_before_it_catches_up(
    database: Database, clock: FrozenClock, work: tuple[Jobs, int]
) -> None:
    _, shard = work
    scheduler = Scheduler(database, ownership=Fixed([shard], "me"), clock=clock)
    scheduler.test_signals.init()
    [report] = await scheduler.pass_once()
    assert report.took_over and report.reaped == 1 and report.materialised == 2
    assert report.promoted == 1  # the delayed run (the reaped one waits out its backoff)
    assert (await scheduler.test_signals.took_over.wait(1)).shard == shard
    [later] = await scheduler.pass_once()
    assert not later.took_over and later.epoch == report.epoch
