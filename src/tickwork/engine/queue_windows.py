"""Queue-wide rate limits in the dispatcher: the windows of the limited queues, each on
its queue's home shard (``store.queue_rates``).

A claim of a limited queue takes leases from the queue's window first, claims at most
that many runs of the queue across the shards, then gives back what it did not use. A
queue whose home shard is down or slow is **closed**: its runs wait (ready, no attempt
used) until the shard answers again, since a window nobody can count might let any
number through. Unlimited queues never reach this module.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from tickwork.core.queue_limits import QueueRateLimit
from tickwork.engine.shard_health import ShardHealth
from tickwork.store import outages, queue_rates
from tickwork.store.database import Database
from tickwork.store.queue_rates import Taken

logger = logging.getLogger(__name__)

# Called with a queue's name when a claim found its window used up (the metric).
HeldBack = Callable[[str], None]


class QueueWindows:
    def __init__(
        self,
        database: Database,
        rates: Mapping[str, QueueRateLimit],
        *,
        held_back: HeldBack | None = None,
        bound_seconds: float = 2.0,
    ) -> None:
        self.database = database
        self.rates = dict(rates)
        self.held_back = held_back
        self.bound_seconds = bound_seconds
        self.health = ShardHealth()

    def limited(self, queues: Iterable[str]) -> list[str]:
        """The queues among ``queues`` that have a rate limit, in order."""
        return [queue for queue in queues if queue in self.rates]

    def home(self, queue: str) -> int:
        """The shard that keeps ``queue``'s window."""
        return self.database.shard_map.shard_of(queue_rates.TENANT, queue_rates.window_key(queue))

    async def take(self, queue: str, wanted: int, now: datetime | None) -> Taken | None:
        """Up to ``wanted`` leases of ``queue``; None when its home shard cannot say
        (the queue is closed for this claim)."""
        rate = self.rates[queue]
        shard = self.home(queue)
        if self.health.skipping(shard):
            return None
        try:
            async with asyncio.timeout(self.bound_seconds):
                async with self.database.connection(shard) as conn:
                    taken = await queue_rates.take(
                        conn, queue, rate.limit, rate.period_seconds, wanted, now
                    )
        except Exception as error:
            if not (isinstance(error, TimeoutError) or outages.is_outage(error)):
                raise
            pause = self.health.failed(shard)
            logger.warning(
                "queue %s: its rate window on shard %d cannot be read (%s); its runs wait "
                "%.1fs before the next try",
                queue,
                shard,
                outages.describe(error),
                pause,
                extra={"action": "queue-window-closed", "shard": shard, "queue": queue},
            )
            return None
        self.health.succeeded(shard)
        return taken

    async def settle(self, taken: Taken, used: int) -> None:
        """After the claim: the leases of ``taken`` beyond ``used`` count no more. A
        give-back that fails leaves them counted until they leave the window: stricter,
        never looser. A claim that used all it was granted and wanted more was held
        back by the window (``held_back``)."""
        if used == taken.granted < taken.wanted and self.held_back is not None:
            self.held_back(taken.queue)
        unused = taken.granted - used
        if unused <= 0:
            return
        try:
            async with asyncio.timeout(self.bound_seconds):
                async with self.database.connection(self.home(taken.queue)) as conn:
                    await queue_rates.give_back(conn, taken, unused)
        except Exception as error:
            if not (isinstance(error, TimeoutError) or outages.is_outage(error)):
                raise
            logger.warning(
                "queue %s: %d unused leases not given back to its rate window (%s)",
                taken.queue,
                unused,
                outages.describe(error),
                extra={"action": "queue-window-give-back-failed", "queue": taken.queue},
            )
