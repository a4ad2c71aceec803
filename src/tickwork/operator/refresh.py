"""The status pass: run-derived status from the database, in batches.

Every ``--status-interval`` seconds the pass drains each shard's set of changed jobs
(``engine.status_feed``), compares what the database says with what each object's
status holds (the object cache: no reads from the API server), and merge-patches only
the fields that differ. A quiet interval writes nothing; activity on ten jobs writes
about ten patches, whatever the number of objects. There is no timer per object.

It also posts the Events that runs cause: ``RunDead`` when ``deadRuns`` grows (at most
one per job per minute, counting the runs), ``AutoPaused`` when tickwork paused the job
after ``spec.pauseAfterFailures`` consecutive dead runs (and rewrites its Ready
condition: reason ``Paused``, the last error in the message), and
``MissedRunsCaughtUp`` when a catch-up inserted missed runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from tickwork.core.records import JobStatus
from tickwork.core.settings import OperatorSettings
from tickwork.engine import outages
from tickwork.engine.status_feed import StatusFeed
from tickwork.operator import status
from tickwork.operator.events import DeadRunNotices, EventRecorder, Reason, run_dead_message
from tickwork.operator.objects import Key, ObjectCache

logger = logging.getLogger("tickwork.operator.status")

DEFAULT_INTERVAL: Final = OperatorSettings.model_fields["status_interval"].default
CONCURRENT_WRITES: Final = 16


class StatusWriter(Protocol):
    async def patch_status(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any] | None: ...


@dataclass
class PassReport:
    changed: int = 0  # jobs drained as changed (and served by this operator)
    patched: int = 0  # status patches written
    events: int = 0


class StatusPass:
    def __init__(
        self,
        feed: StatusFeed,
        shard_count: int,
        objects: ObjectCache,
        writer: StatusWriter,
        events: EventRecorder,
        *,
        namespaces: Collection[str] = (),
        interval: float = DEFAULT_INTERVAL,
        notices: DeadRunNotices | None = None,
    ) -> None:
        self.feed = feed
        self.shard_count = shard_count
        self.objects = objects
        self.writer = writer
        self.events = events
        self.tenants = sorted(namespaces) or None
        self.interval = interval
        self.notices = notices or DeadRunNotices()
        # Jobs to read again next pass: drained before their transactions settled, or
        # whose status write failed.
        self._again: dict[int, set[tuple[str, str]]] = {}
        self._caught_up: dict[Key, int] = {}
        self._dead: dict[Key, int] = {}
        self._auto_paused: dict[Key, str] = {}  # the AutoPaused Event last posted, per job
        # Test signals: the count and the moment of every finished pass.
        self.passes = 0
        self.passed = asyncio.Event()
        self.last: PassReport = PassReport()

    def recheck(self, keys: Iterable[Key]) -> None:
        """Read these jobs again at the next pass, changed or not."""
        for tenant, name in keys:
            shard = self.feed.database.shard_map.shard_of(tenant, name)
            self._again.setdefault(shard, set()).add((tenant, name))

    async def run(self, stop: asyncio.Event) -> None:
        """A pass every ``interval`` seconds until ``stop``."""
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                await self.pass_once()
                await asyncio.wait({stopping}, timeout=self.interval)
        finally:
            stopping.cancel()

    async def pass_once(self) -> PassReport:
        report = PassReport()
        for shard in range(self.shard_count):
            try:
                await self._shard(shard, report)
            except Exception as error:
                if not outages.is_outage(error):
                    raise
                # The shard's set keeps what was not drained; the next pass goes on.
                logger.warning(
                    "status pass: shard %d unavailable: %s",
                    shard,
                    outages.describe(error),
                    extra={"action": "status-pass-error", "shard": shard},
                )
        for key, died in self.notices.due():
            seen = self.objects.get(key)
            if seen is not None:
                dead = int(seen.status.get("deadRuns") or 0)
                self.events.record(seen.reference, Reason.run_dead, run_dead_message(died, dead))
                report.events += 1
        self.last = report
        self.passes += 1
        self.passed.set()
        self.passed = asyncio.Event()
        if report.patched:
            logger.debug(
                "status pass: %d changed, %d patched",
                report.changed,
                report.patched,
                extra={"action": "status-pass"},
            )
        return report

    async def _shard(self, shard: int, report: PassReport) -> None:
        again = sorted(self._again.pop(shard, set()))
        while True:
            drained = await self.feed.drain(shard, self.tenants, again)
            again = []
            if not drained.settled:
                self._again.setdefault(shard, set()).update(drained.keys)
            report.changed += len(drained.statuses)
            limit = asyncio.Semaphore(CONCURRENT_WRITES)

            async def refresh(job: JobStatus, limit: asyncio.Semaphore = limit) -> None:
                async with limit:
                    await self._refresh(shard, job, report)

            async with asyncio.TaskGroup() as group:
                for job in drained.statuses:
                    group.create_task(refresh(job))
            if len(drained.keys) < self.feed.batch:
                return

    async def _refresh(self, shard: int, job: JobStatus, report: PassReport) -> None:
        key = (job.tenant, job.name)
        seen = self.objects.get(key)
        if seen is None or seen.deleting:
            return  # not served here, gone, or going: nothing to show it on
        current = seen.status
        self._announce(key, job, current, report)
        wanted = status.run_fields(job)
        conditions = status.paused_conditions(current, job, self.events.clock())
        if conditions is not None:
            wanted["conditions"] = conditions
        patch = status.changes(current, wanted)
        if not patch:
            return
        try:
            answer = await self.writer.patch_status(job.tenant, job.name, patch)
        except Exception as error:
            self._again.setdefault(shard, set()).add(key)
            logger.warning(
                "cannot write the status of %s/%s (next pass tries again): %s",
                job.tenant,
                job.name,
                error,
                extra={"action": "status-write-error"},
            )
            return
        report.patched += 1
        if answer is not None:
            self.objects.observe(answer)

    def _announce(
        self, key: Key, job: JobStatus, current: Mapping[str, Any], report: PassReport
    ) -> None:
        seen = self.objects.get(key)
        assert seen is not None
        # What the object showed the first time, then what this pass saw last: a status
        # write that failed does not count the same deaths twice.
        baseline = self._dead.get(key, int(current.get("deadRuns") or 0))
        self._dead[key] = job.dead_runs
        count = self.notices.add(key, job.dead_runs - baseline)
        if count is not None:
            self.events.record(
                seen.reference, Reason.run_dead, run_dead_message(count, job.dead_runs)
            )
            report.events += 1
        reason = status.paused_reason(job)
        if reason is not None and reason not in (
            current.get("pausedReason"),
            self._auto_paused.get(key),
        ):
            self.events.record(seen.reference, Reason.auto_paused, reason)
            report.events += 1
        if reason is None:
            self._auto_paused.pop(key, None)
        else:
            self._auto_paused[key] = reason
        before = self._caught_up.get(key)
        self._caught_up[key] = job.missed_caught_up
        if before is not None and job.missed_caught_up > before:
            caught = job.missed_caught_up - before
            message = f"{caught} missed fire time(s) caught up"
            if job.missed_runs_dropped:
                message += f"; {job.missed_runs_dropped} more dropped over the run_all cap"
            self.events.record(seen.reference, Reason.missed_runs_caught_up, message)
            report.events += 1
