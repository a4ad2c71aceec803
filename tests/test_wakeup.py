"""The notifications that wake long-polls: each shard's listener wakes waiters for the
runs of its own shard, also when shards share a database (a schema each)."""

from __future__ import annotations

import asyncio

from tickwork.core.shards import ShardMap
from tickwork.store import database, runs
from tickwork.store.wakeup import CHANNEL, ReadySignal, Waiter


async def _woken_by(waiter: Waiter, shards: set[int]) -> None:
    while not shards <= waiter.shards:
        await waiter.wait(5.0)


async def test_a_ready_run_wakes_its_shard_only(shard_map: ShardMap) -> None:
    # The test shards are schemas of one database: every listener hears every NOTIFY.
    assert len({shard.dsn for shard in shard_map.shards}) == 1
    signal = ReadySignal(shard_map)
    await signal.start()
    notifier = await database.connect(shard_map[2])
    try:
        async with signal.waiter(["work"]) as waiter, signal.waiter(["barrier"]) as barrier:
            async with notifier.transaction():
                await runs.notify_ready(notifier, ["work"])
            # A bare queue name (as earlier versions sent) reaches every listener; each
            # listener delivers in order, so once all have passed it on they have all
            # seen the notification before it.
            await notifier.execute("SELECT pg_notify($1, 'barrier')", CHANNEL)
            await asyncio.wait_for(_woken_by(barrier, set(range(shard_map.count))), 10)
            assert waiter.event.is_set()
            assert waiter.shards == {2}, "a claim would start on shards without the run"
    finally:
        await notifier.close()
        await signal.stop()


async def test_shards_in_one_database_share_one_listening_connection(
    shard_map: ShardMap,
) -> None:
    # One connection hears the whole database's notifications once; a listener per
    # shard heard each one once per shard, and a wake-up waited behind the others.
    signal = ReadySignal(shard_map)
    observer = await database.connect(shard_map[0])
    await signal.start()
    try:
        listening = await observer.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN %'"
        )
        assert listening == 1
        assert signal.connected == set(range(shard_map.count))
        async with signal.waiter(["work"]) as waiter:
            await runs.notify_ready(observer, ["work"])  # outside a transaction: at once
            await asyncio.wait_for(_woken_by(waiter, {0}), 10)
            assert waiter.shards == {0}
    finally:
        await signal.stop()
        await observer.close()
