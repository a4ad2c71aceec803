"""What the scheduler reports about each shard it owns: the canary (enqueued every
minute, judged), the ready backlog per queue and the age of its oldest run, and the
runs that went dead and the jobs paused after them (``pauseAfterFailures``). The
scheduler calls ``observe`` in its pass over a shard; the
reads run at most every ``interval`` seconds, the canary once a minute.

Dead runs are counted from the shard's history, not where they die (a completion on
any dispatcher, the reaper, a DLQ move), so each is counted once, by the replica that
owns the shard. A run counts when its finish time is older than ``SETTLE``: a
transaction that stamped its finish time earlier may commit a little later.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from tickwork.core.spec import Priority
from tickwork.engine import canary
from tickwork.engine.metrics import Metrics
from tickwork.store import observe, queues
from tickwork.store.database import Connection

SETTLE: Final = timedelta(seconds=10)

logger = logging.getLogger(__name__)


@dataclass
class _Shard:
    since: datetime  # when this replica began to observe the shard
    canary_minute: datetime | None = None
    observed_at: datetime | None = None
    dead_until: datetime | None = None


@dataclass
class ShardObserver:
    metrics: Metrics
    interval: timedelta = timedelta(seconds=15)
    canary: bool = True
    _shards: dict[int, _Shard] = field(default_factory=dict)

    async def observe(self, conn: Connection, shard: int, now: datetime) -> None:
        state = self._shards.get(shard)
        if state is None:
            state = self._shards[shard] = _Shard(since=now)
        if self.canary and state.canary_minute != canary.minute_of(now):
            if await canary.enqueue(conn, shard, now):
                self.metrics.canaries.labels(str(shard)).inc()
            state.canary_minute = canary.minute_of(now)
        if state.observed_at is not None and now - state.observed_at < self.interval:
            return
        state.observed_at = now
        self.metrics.set_paused_queues(await queues.all_paused(conn))
        backlog = await observe.ready_backlog(conn, now)
        self.metrics.set_backlog(
            shard,
            [
                (
                    b.tenant,
                    b.queue,
                    Priority.from_rank(b.priority).value,
                    b.ready,
                    b.oldest_seconds,
                )
                for b in backlog
            ],
        )
        held = await observe.held_back(conn, now)
        self.metrics.set_held_back(shard, [(h.tenant, h.job, h.limit, h.runs) for h in held])
        until = now - SETTLE
        after = state.dead_until or until
        if until > after:
            for dead in await observe.dead_between(conn, after, until):
                label = self.metrics.job_label(dead.tenant, dead.job)
                priority = Priority.from_rank(dead.priority).value
                self.metrics.dead_runs.labels(label, priority).inc(dead.count)
            for tenant, job, times in await observe.auto_paused_between(conn, after, until):
                self.metrics.auto_paused.labels(self.metrics.job_label(tenant, job)).inc(times)
        state.dead_until = until
        if self.canary:
            status = await canary.status(conn, now, state.since)
            self.metrics.set_canary(shard, status.lag, status.missed)
            if status.missed >= 2:
                logger.warning(
                    "shard %d: the canary missed %d times in a row",
                    shard,
                    status.missed,
                    extra={"action": "canary-missed", "shard": shard},
                )

    def forget(self, shard: int) -> None:
        """The shard is no longer this replica's: its gauges go, its state is dropped."""
        self._shards.pop(shard, None)
        self.metrics.forget_shard(shard)
