"""A tenant's queues across shards: pause and resume one, list them.

A paused queue keeps taking enqueues (runs wait ``ready``) and hands out no run until it
is resumed: the claim of every shard skips it. A queue's runs span the shards (jobs are
placed by name), so a pause is written to every shard, each in a transaction of its
own; once ``pause`` returns, no claim that starts afterwards, on any dispatcher, leases
from the queue (one already running may still finish with a run it picked). A shard
that cannot be reached fails the call after the others were written: calling again is
safe (a pause and a resume are idempotent), and until then that shard's runs of the
queue may still be leased.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from tickwork.core.clock import Clock
from tickwork.store import queues, runs
from tickwork.store.database import Database

# Queue changes are a tenant's, not a job's: the audit files them under this job name
# (as bulk operations without a job do), in the shard it names.
AUDIT_JOB: Final = "*"


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue of the tenant: named by its jobs, or paused (or both)."""

    queue: str
    jobs: int
    paused_at: datetime | None = None
    paused_by: str | None = None

    @property
    def paused(self) -> bool:
        return self.paused_at is not None


class Queues:
    def __init__(self, database: Database, clock: Clock) -> None:
        self.database = database
        self.clock = clock

    async def pause(self, tenant: str, queue: str, actor: str) -> QueueState:
        """Pause ``queue`` of ``tenant`` on every shard (idempotent: a queue paused
        already keeps its first pause's time and actor)."""
        made = False
        first: queues.Pause | None = None
        for shard in range(self.database.shard_count):
            async with self.database.transaction(shard) as conn:
                found, new = await queues.pause(conn, tenant, queue, actor, self.clock.now())
            made = made or new
            if first is None or found.paused_at < first.paused_at:
                first = found
        assert first is not None
        if made:
            await self._audit(tenant, queue, "pause-queue", actor)
        return QueueState(queue, await self._jobs(tenant, queue), first.paused_at, first.actor)

    async def resume(self, tenant: str, queue: str, actor: str) -> QueueState:
        """Resume ``queue`` of ``tenant`` on every shard (idempotent)."""
        was = False
        for shard in range(self.database.shard_count):
            async with self.database.transaction(shard) as conn:
                was = await queues.resume(conn, tenant, queue) or was
        if was:
            await self._audit(tenant, queue, "resume-queue", actor)
        return QueueState(queue, await self._jobs(tenant, queue))

    async def list(self, tenant: str) -> list[QueueState]:
        """The tenant's queues by name: those its jobs name, and those paused."""
        jobs: dict[str, int] = {}
        paused: dict[str, queues.Pause] = {}
        for shard in range(self.database.shard_count):
            async with self.database.connection(shard) as conn:
                for queue, count in (await queues.job_counts(conn, tenant)).items():
                    jobs[queue] = jobs.get(queue, 0) + count
                for pause in await queues.paused_of_tenant(conn, tenant):
                    known = paused.get(pause.queue)
                    if known is None or pause.paused_at < known.paused_at:
                        paused[pause.queue] = pause
        return [
            QueueState(
                name,
                jobs.get(name, 0),
                paused[name].paused_at if name in paused else None,
                paused[name].actor if name in paused else None,
            )
            for name in sorted(jobs.keys() | paused.keys())
        ]

    async def _jobs(self, tenant: str, queue: str) -> int:
        total = 0
        for shard in range(self.database.shard_count):
            async with self.database.connection(shard) as conn:
                total += (await queues.job_counts(conn, tenant)).get(queue, 0)
        return total

    async def _audit(self, tenant: str, queue: str, action: str, actor: str) -> None:
        shard = self.database.shard_map.shard_of(tenant, AUDIT_JOB)
        async with self.database.transaction(shard) as conn:
            await runs.audit(
                conn, tenant, AUDIT_JOB, None, action, actor, {"queue": queue}, self.clock.now()
            )
