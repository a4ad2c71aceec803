"""The listener that wakes long-polls (LISTEN tickwork_ready) notices a link that died
without a word, reconnects by itself, and wakes waiters again."""

from __future__ import annotations

import asyncpg

from faults.conftest import SHARDS, eventually, proxied_map
from faults.proxy import TcpProxy
from tickwork.store.wakeup import CHANNEL, ReadySignal


async def test_a_silently_dropped_listener_link_is_noticed_and_replaced(
    fault_url: str, proxies: list[TcpProxy]
) -> None:
    signal = ReadySignal(
        proxied_map(fault_url, proxies), reconnect_delay=0.05, probe_interval=0.2, probe_timeout=0.2
    )
    await signal.start()
    notifier = await asyncpg.connect(fault_url)
    try:
        await eventually(lambda: len(signal.connected) == SHARDS, what="listening")
        accepted = [proxy.accepted for proxy in proxies]
        for proxy in proxies:  # a firewall forgets every connection: no FIN, no RST
            proxy.blackhole()
        await eventually(
            lambda: all(p.accepted > n for p, n in zip(proxies, accepted, strict=True)),
            within=5,
            what="new listening connections",
        )
        await eventually(lambda: len(signal.connected) == SHARDS, what="listening again")
        async with signal.waiter(["default"]) as waiter:
            await notifier.execute("SELECT pg_notify($1, 'default')", CHANNEL)
            assert await waiter.wait(2.0), "the notification did not wake the waiter"
    finally:
        await notifier.close()
        await signal.stop()
