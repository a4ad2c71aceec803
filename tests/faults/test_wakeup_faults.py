"""The listener that wakes long-polls (LISTEN tickwork_ready) notices a link that died
without a word or hangs before its LISTEN is answered, reconnects by itself, and wakes
waiters again."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from faults.conftest import SHARDS, proxied_map
from faults.proxy import TcpProxy
from tickwork.core.shards import Shard
from tickwork.core.testsignal import TestSignal
from tickwork.store import database
from tickwork.store.wakeup import CHANNEL, ReadySignal


async def shards_signalled(signal: TestSignal[int], within: float = 5.0) -> set[int]:
    """The shards of the next signals, one per shard."""
    seen: set[int] = set()
    while len(seen) < SHARDS:
        seen.add(await signal.wait_for(lambda shard: shard not in seen, within))
    return seen


async def test_a_silently_dropped_listener_link_is_noticed_and_replaced(
    fault_url: str, proxies: list[TcpProxy]
) -> None:
    signal = ReadySignal(
        proxied_map(fault_url, proxies), reconnect_delay=0.05, probe_interval=0.2, probe_timeout=0.2
    )
    signal.test_signals.init()
    await signal.start()
    notifier = await asyncpg.connect(fault_url)
    try:
        assert await shards_signalled(signal.test_signals.listening) == set(range(SHARDS))
        accepted = [proxy.accepted for proxy in proxies]
        for proxy in proxies:  # a firewall forgets every connection: no FIN, no RST
            proxy.blackhole()
        # Each probe goes unanswered, the link is given up and a new one made.
        assert await shards_signalled(signal.test_signals.lost) == set(range(SHARDS))
        assert await shards_signalled(signal.test_signals.listening) == set(range(SHARDS))
        assert all(p.accepted > n for p, n in zip(proxies, accepted, strict=True))
        assert signal.connected == set(range(SHARDS))
        async with signal.waiter(["default"]) as waiter:
            await notifier.execute("SELECT pg_notify($1, 'default')", CHANNEL)
            assert await waiter.wait(2.0), "the notification did not wake the waiter"
    finally:
        await notifier.close()
        await signal.stop()


async def test_a_link_that_hangs_before_its_listen_holds_up_neither_start_nor_wake_ups(
    fault_url: str, proxies: list[TcpProxy], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first link of the first shard connects, then hangs before LISTEN is answered.
    connect = database.connect

    async def connect_then_hang(shard: Shard, *args: Any, **kwargs: Any) -> asyncpg.Connection:
        conn = await connect(shard, *args, **kwargs)
        if shard.number == 0:
            proxies[0].hang()
            monkeypatch.setattr(database, "connect", connect)  # only this first link
        return conn

    monkeypatch.setattr(database, "connect", connect_then_hang)
    signal = ReadySignal(
        proxied_map(fault_url, proxies), reconnect_delay=0.05, probe_interval=0.2, probe_timeout=0.2
    )
    signal.test_signals.init()
    await asyncio.wait_for(signal.start(), 5)  # start-up does not wait on the hung LISTEN
    notifier = await asyncpg.connect(fault_url)
    try:
        assert await signal.test_signals.lost.wait_for(lambda shard: shard == 0, 5) == 0
        proxies[0].heal()
        assert await signal.test_signals.listening.wait_for(lambda shard: shard == 0, 5) == 0
        assert 0 in signal.connected
        async with signal.waiter(["default"]) as waiter:
            schema = signal.shard_map[0].schema
            await notifier.execute("SELECT pg_notify($1, $2)", CHANNEL, f"{schema} default")
            assert await waiter.wait(2.0), "the notification did not wake the waiter"
            assert 0 in waiter.shards
    finally:
        await notifier.close()
        await signal.stop()
