"""The per-shard set of changed jobs the operator's status pass drains."""

from __future__ import annotations

from tickwork.core.records import Manager
from tickwork.core.spec import JobSpec
from tickwork.engine.jobs import Jobs
from tickwork.engine.status_feed import StatusFeed
from tickwork.store import changes
from tickwork.store.database import Database


async def test_marking_a_marked_job_writes_nothing(database: Database) -> None:
    async with database.connection(0) as conn:
        await changes.mark(conn, [("acme", "a"), ("acme", "a"), ("acme", "b")])
        first = await conn.fetch("SELECT tenant, job, xmin::text AS x FROM changed_jobs")
        await changes.mark(conn, [("acme", "a")])
        again = await conn.fetch("SELECT tenant, job, xmin::text AS x FROM changed_jobs")
    assert sorted((r["job"], r["x"]) for r in again) == sorted((r["job"], r["x"]) for r in first)
    assert sorted(r["job"] for r in first) == ["a", "b"]


async def test_a_drain_takes_the_set_and_waits_for_the_transactions_in_flight(
    database: Database,
) -> None:
    async with database.connection(0) as writer, database.connection(0) as reader:
        await changes.mark(writer, [("acme", "a")])
        transaction = writer.transaction()
        await transaction.start()
        await writer.execute("SELECT pg_current_xact_id()")  # in flight, with an xid
        keys, snapshot = await changes.drain(reader, 10)
        assert keys == [("acme", "a")]
        assert not await changes.settled(reader, snapshot)  # its change may be unread
        await transaction.commit()
        assert await changes.settled(reader, snapshot)
        assert (await changes.drain(reader, 10))[0] == []  # taken off the set


async def test_the_feed_reads_the_status_of_the_managed_jobs_that_changed(
    database: Database,
) -> None:
    jobs = Jobs(database)
    await jobs.put("acme", "declared", JobSpec(), "operator", manager=Manager.kubernetes)
    await jobs.put("acme", "api-made", JobSpec(), "api")
    shard_declared = jobs.shard_of("acme", "declared")
    feed = StatusFeed(database, Manager.kubernetes)
    found = []
    for shard in range(database.shard_count):
        drained = await feed.drain(shard)
        assert drained.settled
        found += [(shard, s.name) for s in drained.statuses]
    assert found == [(shard_declared, "declared")]
    for shard in range(database.shard_count):  # drained: a quiet shard gives nothing
        assert (await feed.drain(shard)).keys == []
