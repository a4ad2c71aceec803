"""The scheduler role: for every shard this replica owns, at least once a second,
materialise due cron runs, flip due runs to ``ready`` (deciding the fires of jobs with
an overlap policy), skip runs past their starting deadline and reap expired leases.

Ownership comes from ``coordination`` (``Ownership``): leases say which shards this
replica SHOULD work on, and stop saying so before they can have expired for the
others. Whose writes count is the shard's epoch (``store.epochs``): on taking a shard
the scheduler moves its epoch on before anything else, and every transaction of a
pass checks it first, so a deposed replica (paused, cut off, its lease expired)
writes nothing: the refusal is counted (``tickwork_scheduler_epoch_conflicts_total``)
and the shard given up. A new owner reaps first, then catches up missed runs, both
idempotent.

Shards are independent: each owned shard has a loop of its own, and a shard that fails
(PostgreSQL restarting, a link reset or hung) is logged, backed off and retried on its
own while the others keep their pace. Nothing a shard does ends the loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Final

from tickwork.coordination.ownership import (
    Acquired,
    Event,
    Failed,
    Fixed,
    Lost,
    Observed,
    Ownership,
    Released,
)
from tickwork.core import backoff
from tickwork.core.clock import Clock, DatabaseClock
from tickwork.core.settings import SchedulerSettings
from tickwork.core.spec import Priority
from tickwork.core.testsignal import Signals, TestSignal
from tickwork.engine import jobs, materialiser, operations, watches
from tickwork.engine.metrics import Metrics
from tickwork.engine.observer import ShardObserver
from tickwork.store import epochs, outages, retention, sweeps
from tickwork.store.database import Connection, Database

logger = logging.getLogger(__name__)


@dataclass
class TickReport:
    """What one pass over one shard did."""

    shard: int
    epoch: int = 0
    took_over: bool = False
    materialised: int = 0
    promoted: int = 0
    skipped: int = 0
    reaped: int = 0
    # Runs an overlapPolicy Replace stopped (cancelled, or asked to stop).
    replaced: int = 0
    # Runs bulk operations acted on (replayed, discarded, cancelled).
    operated: int = 0
    # Notifications made for runs past their deadline or leased too long.
    notified: int = 0
    # Seconds until this shard's next waiting run is due (None: nothing waiting).
    next_due_in: float | None = None

    @property
    def changed(self) -> bool:
        return bool(
            self.materialised
            or self.promoted
            or self.skipped
            or self.reaped
            or self.replaced
            or self.operated
        )


@dataclass(frozen=True, slots=True)
class Refusal:
    """A transaction refused by the epoch check: the replica was deposed."""

    shard: int
    step: str
    epoch: int
    current: int | None
    owner: str | None


@dataclass
class SchedulerSignals(Signals):
    """Test signals: a pass ended (its reports: of every owned shard for
    ``pass_once``, of one shard in ``run``, which works on each on its own); a shard was
    taken over (its number, once its first pass is done); a write was refused by
    the epoch check."""

    passed: TestSignal[list[TickReport]] = field(default_factory=lambda: TestSignal("pass"))
    took_over: TestSignal[TickReport] = field(default_factory=lambda: TestSignal("takeover"))
    refused: TestSignal[Refusal] = field(default_factory=lambda: TestSignal("epoch refusal"))


class _Lapsed(Exception):
    """The replica may no longer write to the shard (its ownership ended locally)."""


@dataclass
class _Owned:
    term: int
    fence: epochs.Fence


# ``tickwork scheduler``'s defaults: what a scheduler built without settings runs with.
DEFAULT_SETTINGS: Final = SchedulerSettings()


class Scheduler:
    """Runs the per-shard loops over the shards ``ownership`` says this replica owns
    (without one: ``shards``, or every shard, always; a single replica)."""

    def __init__(
        self,
        database: Database,
        settings: SchedulerSettings = DEFAULT_SETTINGS,
        *,
        ownership: Ownership | None = None,
        clock: Clock | None = None,
        shards: Collection[int] | None = None,
        rng: random.Random | None = None,
        metrics: Metrics | None = None,
        observer: ShardObserver | None = None,
        before_write: Callable[[int, str], None] | None = None,
    ) -> None:
        """``settings`` say how (``tickwork scheduler``'s options, the same model);
        the rest is what a process gives it: whose shards (``ownership``; without one
        ``shards``, or every shard), which clock, where its metrics and shard
        observations go, and a fault-injection hook."""
        self.database = database
        self.settings = settings
        if ownership is None:
            every = range(database.shard_count) if shards is None else shards
            ownership = Fixed(every)
        self.ownership = ownership
        self.identity = ownership.identity
        self.clock = clock or DatabaseClock()
        self.interval = settings.interval
        self.batch = settings.batch
        self.rng = rng
        self.metrics = metrics
        self.retention_days = settings.retention_days
        self.audit_retention_days = settings.audit_retention_days
        self.maintenance_interval = settings.maintenance_interval
        self.retry_base_seconds = settings.retry_base_seconds
        self.retry_max_seconds = settings.retry_max_seconds
        # A scheduler transaction that stalls this long (its process paused or cut off
        # mid-way) is ended by the server, so a takeover does not wait on it for long.
        self.stall_seconds = settings.coordination.stall_seconds
        self.takeover_wait_seconds = settings.coordination.takeover_wait_seconds
        # Bulk operations: runs per batch (one transaction), and seconds of batches per
        # pass and shard, so a large operation never holds the shard's pass up.
        self.operations_batch = settings.operations_batch
        self.operations_budget_seconds = settings.operations_budget_seconds
        # Called before each transaction with (shard, step): fault-injection tests
        # pause the process there, the widest window a pause can hit.
        self.before_write = before_write
        # Shard metrics and the canary; None: the scheduler reports only its own steps.
        self.observer = observer
        self._owned: dict[int, _Owned] = {}
        self._acquired_at: dict[int, float] = {}
        self._maintained: dict[int, float] = {}
        self._watched: dict[int, float] = {}
        self._steps: dict[int, str] = {}  # the step each shard's pass is at
        # Per failing shard: consecutive failures, and the loop time of its next try.
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}
        self._rng = rng or random.Random()
        self.test_signals = SchedulerSignals()
        self._wake = asyncio.Event()
        self._wakes: dict[int, asyncio.Event] = {}  # per shard loop
        ownership.subscribe(self._on_ownership)

    def wake(self) -> None:
        """Run the next pass over every shard now instead of at its next interval."""
        self._wake.set()
        for event in self._wakes.values():
            event.set()

    def failing(self) -> list[int]:
        """The owned shards whose last pass failed (their database down or hanging)."""
        owned = self.ownership.owned()
        return sorted(shard for shard in self._failures if shard in owned)

    # --- one shard ---

    async def tick(self, shard: int, term: int | None = None) -> TickReport | None:
        """One pass over ``shard`` if this replica owns it (None: it does not, or no
        longer does). Raises ``epochs.Deposed`` when its epoch was taken."""
        if term is None:
            term = self.ownership.owned().get(shard)
            if term is None:
                return None
        async with self.ownership.lock(shard):
            if not self.ownership.owns(shard, term):
                return None
            async with self.database.connection(shard) as conn:
                try:
                    return await self._work(conn, shard, term)
                except _Lapsed:
                    logger.info(
                        "shard %d: stopped mid-pass, no longer owned",
                        shard,
                        extra={"action": "scheduler-lapsed", "shard": shard},
                    )
                    return None

    async def _work(self, conn: Connection, shard: int, term: int) -> TickReport:
        now = self.clock.now()
        owned = self._owned.get(shard)
        report = TickReport(shard)
        if owned is None or owned.term != term:
            self._guard(shard, term, "take-epoch")
            holder = await epochs.take(
                conn, self.identity, now, wait_seconds=self.takeover_wait_seconds
            )
            owned = _Owned(term, epochs.Fence(holder.epoch, self.stall_seconds))
            self._owned[shard] = owned
            report.took_over = True
            logger.info(
                "shard %d: epoch %d taken; reaping and catching up",
                shard,
                holder.epoch,
                extra={"action": "scheduler-takeover", "shard": shard, "epoch": holder.epoch},
            )
        fence = owned.fence
        report.epoch = fence.epoch
        if report.took_over:
            # A new owner reaps first (leases left by a dead owner's era), then catches up.
            report.reaped = await self._reap(conn, shard, term, fence)
        self._guard(shard, term, "materialise")
        made = await materialiser.materialise_all(
            conn, now, fence=fence, before_batch=lambda: self._guard(shard, term, "materialise")
        )
        report.materialised = made.runs
        self._guard(shard, term, "promote")
        promoted = await sweeps.promote_due(conn, self.batch, now, fence=fence)
        report.promoted, report.skipped = promoted.ready, promoted.skipped
        report.replaced = len(promoted.overlap.replaced)
        self._count_overlap(promoted.overlap)
        if not report.took_over:
            report.reaped = await self._reap(conn, shard, term, fence)
        report.next_due_in = await sweeps.seconds_until_next_due(conn, now)
        self._guard(shard, term, "operations")
        worked = await operations.work(
            conn,
            now,
            fence=fence,
            batch=self.operations_batch,
            budget_seconds=self.operations_budget_seconds,
            before_batch=lambda: self._guard(shard, term, "operations"),
        )
        report.operated = worked.acted
        if worked.more:
            # A bulk operation is under way: the next pass comes soon, not in a second.
            report.next_due_in = 0.0
        report.notified = await self._watch(conn, shard, term, fence)
        await self._maintain(conn, shard, term, fence)
        if self.observer is not None:
            self._guard(shard, term, "observe")
            await self.observer.observe(conn, shard, await jobs.database_now(conn, self.clock))
        self._guard(shard, term, "record-pass")
        await epochs.record_pass(conn, fence, self.clock.now())
        return report

    async def _reap(self, conn: Connection, shard: int, term: int, fence: epochs.Fence) -> int:
        self._guard(shard, term, "reap")
        reaped = await sweeps.reap(conn, self.batch, self.clock.now(), self.rng, fence=fence)
        if self.metrics is not None:
            for tenant, job, rank in reaped.expired:
                label = self.metrics.job_label(tenant, job)
                self.metrics.lease_expiries.labels(label, Priority.from_rank(rank).value).inc()
        return reaped.total

    def _count_overlap(self, overlap: sweeps.Overlapped) -> None:
        if self.metrics is None:
            return
        for action, runs in (("skipped", overlap.skipped), ("replaced", overlap.replaced)):
            for tenant, job in runs:
                self.metrics.overlap_runs.labels(self.metrics.job_label(tenant, job), action).inc()

    def _guard(self, shard: int, term: int, step: str) -> None:
        """Before each transaction: go on only while the shard is still owned."""
        self._steps[shard] = step
        if self.before_write is not None:
            self.before_write(shard, step)
        if not self.ownership.owns(shard, term):
            raise _Lapsed(shard)

    async def _watch(self, conn: Connection, shard: int, term: int, fence: epochs.Fence) -> int:
        """Every few seconds: notifications of runs past their job's deadline or leased
        longer than it allows (engine.watches)."""
        moment = asyncio.get_running_loop().time()
        last = self._watched.get(shard)
        if last is not None and moment - last < watches.INTERVAL_SECONDS:
            return 0
        self._guard(shard, term, "watch")
        made = await watches.look(conn, self.clock.now(), fence=fence)
        self._watched[shard] = moment
        return made

    async def _maintain(self, conn: Connection, shard: int, term: int, fence: epochs.Fence) -> None:
        """Hourly: run-history partitions ahead, expired ones dropped, old audit
        entries deleted."""
        moment = asyncio.get_running_loop().time()
        last = self._maintained.get(shard)
        if last is not None and moment - last < self.maintenance_interval:
            return
        now = self.clock.now()
        self._guard(shard, term, "retention")
        created = await retention.ensure_all_partitions(conn, now, fence=fence)
        dropped = await retention.drop_expired(conn, now, self.retention_days, fence=fence)
        forgotten = await retention.forget_old_audit(
            conn, now, self.audit_retention_days, fence=fence
        )
        # Only once it worked: a pass cut short by an outage tries again next pass.
        self._maintained[shard] = moment
        if created or dropped or forgotten:
            logger.info(
                "shard %d: history partitions created %s, dropped %s; %d audit entries past"
                " their retention deleted",
                shard,
                created,
                dropped,
                forgotten,
                extra={"action": "retention", "shard": shard},
            )

    # --- every owned shard ---

    async def pass_once(self) -> list[TickReport]:
        """One pass over the owned shards that are not backing off; never raises for a
        shard's failure (it is logged, and the shard retried after a backoff)."""
        owned = self._forget_lost()
        moment = asyncio.get_running_loop().time()
        due = [(s, t) for s, t in sorted(owned.items()) if self._retry_at.get(s, moment) <= moment]
        results = await asyncio.gather(*(self._guarded_tick(shard, term) for shard, term in due))
        reports = [report for report in results if report is not None]
        self.test_signals.passed.signal(reports)
        return reports

    def _forget_lost(self) -> Mapping[int, int]:
        owned = self.ownership.owned()
        for shard in [s for s, mine in self._owned.items() if owned.get(s) != mine.term]:
            del self._owned[shard]  # lost meanwhile: a later term takes the epoch anew
        return owned

    async def _guarded_tick(self, shard: int, term: int) -> TickReport | None:
        try:
            report = await self.tick(shard, term)
        except epochs.Deposed as refused:
            self._deposed(shard, term, refused)
            return None
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
        if report is not None:
            self._reported(report)
        return report

    def _reported(self, report: TickReport) -> None:
        shard = report.shard
        acquired = self._acquired_at.pop(shard, None)
        if acquired is not None:
            seconds = asyncio.get_running_loop().time() - acquired
            if self.metrics is not None:
                self.metrics.takeover.observe(seconds)
            logger.info(
                "shard %d taken over in %.3fs (epoch %d, reaped %d, materialised %d)",
                shard,
                seconds,
                report.epoch,
                report.reaped,
                report.materialised,
                extra={"action": "scheduler-took-over", "shard": shard, "epoch": report.epoch},
            )
        if report.took_over:
            self.test_signals.took_over.signal(report)
        if report.changed:
            logger.info(
                "scheduler pass: shard %d materialised %d, promoted %d, skipped %d, "
                "reaped %d, replaced %d",
                shard,
                report.materialised,
                report.promoted,
                report.skipped,
                report.reaped,
                report.replaced,
                extra={"action": "scheduler-pass", "shard": shard},
            )
            if self.metrics is not None:
                for step in ("materialised", "promoted", "skipped", "reaped"):
                    self.metrics.scheduler_rows.labels(step).inc(getattr(report, step))

    def _deposed(self, shard: int, term: int, refused: epochs.Deposed) -> None:
        step = self._steps.get(shard, "write")
        self._owned.pop(shard, None)
        self._acquired_at.pop(shard, None)
        logger.warning(
            "shard %d: write refused, epoch %d was deposed (the shard is at epoch %s, "
            "owner %s); giving the shard up",
            shard,
            refused.epoch,
            refused.current,
            refused.owner,
            extra={"action": "epoch-conflict", "shard": shard, "epoch": refused.epoch},
        )
        if self.metrics is not None:
            self.metrics.epoch_conflicts.labels(step).inc()
        self.test_signals.refused.signal(
            Refusal(shard, step, refused.epoch, refused.current, refused.owner)
        )
        self.ownership.deposed(shard, term)

    def _failed(self, shard: int, error: Exception) -> None:
        failures = self._failures.get(shard, 0) + 1
        self._failures[shard] = failures
        delay = backoff.delay(
            failures, self.retry_base_seconds, self.retry_max_seconds, self._rng
        ).total_seconds()
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

    def _on_ownership(self, event: Event) -> None:
        metrics = self.metrics
        if isinstance(event, Acquired):
            self._acquired_at[event.shard] = asyncio.get_running_loop().time()
            if metrics is not None:
                metrics.shard_acquisitions.inc()
                if event.transition:
                    metrics.shard_transitions.inc()
            self.wake()  # take it over now, not at the next interval
        elif isinstance(event, Lost):
            self._acquired_at.pop(event.shard, None)
            if self.observer is not None:
                self.observer.forget(event.shard)
            if metrics is not None:
                metrics.shard_losses.labels(event.reason).inc()
        elif isinstance(event, Released):
            if self.observer is not None:
                self.observer.forget(event.shard)
            if metrics is not None:
                metrics.shard_releases.labels(event.reason).inc()
        elif isinstance(event, Observed):
            if metrics is not None:
                metrics.scheduler_members.set(event.members)
        elif isinstance(event, Failed) and metrics is not None:
            metrics.coordination_errors.labels(event.operation).inc()
        if metrics is not None:
            metrics.shards_owned.set(len(self.ownership.owned()))

    def _pause(self, shard: int, report: TickReport | None) -> float:
        """Until the shard's next pass: the interval, or sooner when a waiting run falls
        due before it (so a run is ready within milliseconds of its time, not a second),
        or when the shard's backoff after a failure ends."""
        pauses = [self.interval]
        if report is not None and report.next_due_in is not None:
            pauses.append(report.next_due_in)
        retry_at = self._retry_at.get(shard)
        if retry_at is not None:
            pauses.append(retry_at - asyncio.get_running_loop().time())
        # A floor keeps a run held by a slow transaction from turning this into a spin.
        return max(0.01, min(pauses))

    async def run(self, stop: asyncio.Event) -> None:
        """Work on every owned shard until ``stop`` is set: a loop per shard, so a shard
        whose database hangs holds up no other; ownership is kept current alongside,
        and given up (every lease released) once the passes in flight have ended."""
        halt = asyncio.Event()
        done = asyncio.Event()
        keeping = asyncio.create_task(self.ownership.run(done))
        loops: dict[int, asyncio.Task[None]] = {}
        try:
            while not stop.is_set():
                if keeping.done():
                    keeping.result()  # a coordination bug ends the role loudly
                    raise RuntimeError("shard ownership stopped on its own")
                self._wake.clear()
                for shard, running in list(loops.items()):
                    if running.done():
                        del loops[shard]
                        running.result()  # a bug in a shard's loop ends the role loudly
                for shard in self._forget_lost():
                    if shard not in loops:
                        loops[shard] = asyncio.create_task(self._shard_loop(shard, halt))
                waiters = {
                    asyncio.create_task(stop.wait()),
                    asyncio.create_task(self._wake.wait()),
                }
                try:
                    await asyncio.wait(
                        {*waiters, keeping, *loops.values()},
                        timeout=self.interval,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    for waiter in waiters:
                        waiter.cancel()
        finally:
            halt.set()
            await asyncio.gather(*loops.values(), return_exceptions=True)
            done.set()
            await keeping

    async def _shard_loop(self, shard: int, halt: asyncio.Event) -> None:
        """Passes over one shard while it is owned, until ``halt``."""
        wake = self._wakes.setdefault(shard, asyncio.Event())
        loop = asyncio.get_running_loop()
        while not halt.is_set():
            term = self.ownership.owned().get(shard)
            if term is None:
                return  # lost or shed: started again if it is owned again
            wake.clear()
            report = None
            retry_at = self._retry_at.get(shard)
            if retry_at is None or retry_at <= loop.time():
                report = await self._guarded_tick(shard, term)
                self.test_signals.passed.signal([] if report is None else [report])
            halting = asyncio.create_task(halt.wait())
            woken = asyncio.create_task(wake.wait())
            try:
                await asyncio.wait(
                    {halting, woken},
                    timeout=self._pause(shard, report),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                halting.cancel()
                woken.cancel()
