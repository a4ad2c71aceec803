"""The scheduler role: for every shard it owns, at least once a second, materialise due
cron runs, flip due runs to ``ready``, skip runs past their starting deadline and reap
expired leases. Each step is one single-shard transaction and idempotent, so a new
owner after a failover simply runs them again.

Shards are independent: a pass works on them concurrently, and a shard that fails
(PostgreSQL restarting, a link reset or hung) is logged, backed off and retried on its
own while the others keep their pace. Nothing a shard does ends the loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass

from tickwork.core import backoff
from tickwork.core.clock import Clock, DatabaseClock
from tickwork.core.spec import Priority
from tickwork.engine import jobs, materialiser
from tickwork.engine.metrics import Metrics
from tickwork.engine.observer import ShardObserver
from tickwork.store import leases, outages, retention
from tickwork.store.database import Connection, Database

logger = logging.getLogger(__name__)


@dataclass
class TickReport:
    """What one pass over one shard did."""

    shard: int
    materialised: int = 0
    promoted: int = 0
    skipped: int = 0
    reaped: int = 0
    # Seconds until this shard's next waiting run is due (None: nothing waiting).
    next_due_in: float | None = None

    @property
    def changed(self) -> bool:
        return bool(self.materialised or self.promoted or self.skipped or self.reaped)


class Scheduler:
    """Runs the per-shard loops. ``shards`` are the shards this replica owns."""

    def __init__(
        self,
        database: Database,
        *,
        clock: Clock | None = None,
        shards: Sequence[int] | None = None,
        interval: float = 1.0,
        batch: int = 5000,
        rng: random.Random | None = None,
        metrics: Metrics | None = None,
        retention_days: int = retention.DEFAULT_RETENTION_DAYS,
        maintenance_interval: float = 3600.0,
        retry_base_seconds: float = 0.25,
        retry_max_seconds: float = 5.0,
        observer: ShardObserver | None = None,
    ) -> None:
        self.database = database
        self.clock = clock or DatabaseClock()
        self.shards = list(range(database.shard_count) if shards is None else shards)
        self.interval = interval
        self.batch = batch
        self.rng = rng
        self.metrics = metrics
        self.retention_days = retention_days
        self.maintenance_interval = maintenance_interval
        self.retry_base_seconds = retry_base_seconds
        self.retry_max_seconds = retry_max_seconds
        # Shard metrics and the canary; None: the scheduler reports only its own steps.
        self.observer = observer
        self._maintained: dict[int, float] = {}
        # Per failing shard: consecutive failures, and the loop time of its next try.
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}
        self._rng = rng or random.Random()
        # Test signal: set after every full pass over the owned shards.
        self.passed = asyncio.Event()
        self.passes = 0
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Run the next pass now instead of at the next interval."""
        self._wake.set()

    async def tick(self, shard: int) -> TickReport:
        now = self.clock.now()
        report = TickReport(shard)
        async with self.database.connection(shard) as conn:
            made = await materialiser.materialise_all(conn, now)
            report.materialised = made.runs
            promoted = await leases.promote_due(conn, self.batch, now)
            report.promoted, report.skipped = promoted.ready, promoted.skipped
            reaped = await leases.reap(conn, self.batch, now, self.rng)
            report.reaped = reaped.total
            report.next_due_in = await leases.seconds_until_next_due(conn, now)
            await self._maintain(conn, shard)
            if self.observer is not None:
                await self.observer.observe(conn, shard, await jobs.database_now(conn, self.clock))
        if self.metrics is not None:
            for tenant, job, rank in reaped.expired:
                label = self.metrics.job_label(tenant, job)
                self.metrics.lease_expiries.labels(label, Priority.from_rank(rank).value).inc()
        if report.changed:
            logger.info(
                "scheduler pass: shard %d materialised %d, promoted %d, skipped %d, reaped %d",
                shard,
                report.materialised,
                report.promoted,
                report.skipped,
                report.reaped,
                extra={"action": "scheduler-pass", "shard": shard},
            )
            if self.metrics is not None:
                for step in ("materialised", "promoted", "skipped", "reaped"):
                    self.metrics.scheduler_rows.labels(step).inc(getattr(report, step))
        return report

    async def _maintain(self, conn: Connection, shard: int) -> None:
        """Hourly: run-history partitions ahead, expired ones dropped."""
        moment = asyncio.get_running_loop().time()
        last = self._maintained.get(shard)
        if last is not None and moment - last < self.maintenance_interval:
            return
        now = self.clock.now()
        created = await retention.ensure_all_partitions(conn, now)
        dropped = await retention.drop_expired(conn, now, self.retention_days)
        # Only once it worked: a pass cut short by an outage tries again next pass.
        self._maintained[shard] = moment
        if created or dropped:
            logger.info(
                "shard %d: history partitions created %s, dropped %s",
                shard,
                created,
                dropped,
                extra={"action": "retention", "shard": shard},
            )

    async def pass_once(self) -> list[TickReport]:
        """One pass over the owned shards that are not backing off; never raises for a
        shard's failure (it is logged, and the shard retried after a backoff)."""
        moment = asyncio.get_running_loop().time()
        due = [s for s in self.shards if self._retry_at.get(s, moment) <= moment]
        results = await asyncio.gather(*(self._guarded_tick(shard) for shard in due))
        self.passes += 1
        self.passed.set()
        return [report for report in results if report is not None]

    async def _guarded_tick(self, shard: int) -> TickReport | None:
        try:
            report = await self.tick(shard)
        except Exception as error:
            self._failed(shard, error)
            return None
        failures = self._failures.pop(shard, 0)
        self._retry_at.pop(shard, None)
        if failures:
            logger.info(
                "shard %d is reachable again after %d failed pass(es)",
                shard,
                failures,
                extra={"action": "scheduler-recovered", "shard": shard},
            )
        return report

    def _failed(self, shard: int, error: Exception) -> None:
        failures = self._failures.get(shard, 0) + 1
        self._failures[shard] = failures
        ceiling = backoff.ceiling(failures, self.retry_base_seconds, self.retry_max_seconds)
        delay = self._rng.uniform(ceiling / 2, ceiling)
        self._retry_at[shard] = asyncio.get_running_loop().time() + delay
        outage = outages.is_outage(error)
        if self.metrics is not None:
            self.metrics.scheduler_errors.labels("outage" if outage else "error").inc()
        if outage:
            logger.warning(
                "shard %d unavailable (%s); retry %d in %.2fs",
                shard,
                outages.describe(error),
                failures,
                delay,
                extra={"action": "scheduler-error", "shard": shard},
            )
        else:
            # Not an outage: a bug or bad data. Say so loudly, but keep the other
            # shards (and this one, after the backoff) going.
            logger.error(
                "shard %d pass failed; retry %d in %.2fs",
                shard,
                failures,
                delay,
                exc_info=error,
                extra={"action": "scheduler-error", "shard": shard},
            )

    def _pause(self, reports: Sequence[TickReport]) -> float:
        """Until the next pass: the interval, or sooner when a waiting run falls due
        before it (so a run is ready within milliseconds of its time, not a second), or
        when a failing shard's backoff ends."""
        upcoming = [r.next_due_in for r in reports if r.next_due_in is not None]
        moment = asyncio.get_running_loop().time()
        retries = [at - moment for at in self._retry_at.values()]
        # A floor keeps a run held by a slow transaction from turning this into a spin.
        return max(0.01, min([self.interval, *upcoming, *retries]))

    async def run(self, stop: asyncio.Event) -> None:
        """Pass over the shards every ``interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            reports = await self.pass_once()
            pause = self._pause(reports)
            self._wake.clear()
            stopped = asyncio.create_task(stop.wait())
            woken = asyncio.create_task(self._wake.wait())
            try:
                await asyncio.wait(
                    {stopped, woken}, timeout=pause, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                stopped.cancel()
                woken.cancel()
