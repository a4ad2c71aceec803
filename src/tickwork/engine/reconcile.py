"""One path from a declared ScheduledJob to a stored definition.

The operator's Kopf handlers (objects from the Kubernetes API) and ``tickwork dev
--manifests`` (YAML files) both go through a ``Reconciler``, so a ScheduledJob means
the same thing wherever it is declared:

- ``apply`` stores the spec in the job's shard, marked as kept by its declaration
  (``Manager``), and answers what the status should say. Applying the spec already
  stored writes nothing (no generation bump, no audit entry).
- ``remove`` deletes a job the declaration keeps, cancelling its pending runs and
  keeping their history.
- ``prune`` removes the jobs the declaration keeps that are no longer declared (their
  object or file went away while nobody was watching).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from tickwork.core.errors import NotFound
from tickwork.core.records import Definition, JobStatus, Manager
from tickwork.engine import manifests
from tickwork.engine.jobs import Change, Jobs
from tickwork.engine.manifests import JobKey, ScheduledJob


@dataclass(frozen=True, slots=True)
class Applied:
    """A declaration stored (or found stored already) and what its status is now."""

    job: ScheduledJob
    change: Change
    definition: Definition
    status: JobStatus


@dataclass(frozen=True, slots=True)
class Removed:
    tenant: str
    name: str
    cancelled: int
    cancel_requested: int


class Reconciler:
    def __init__(self, jobs: Jobs, manager: Manager, actor: str) -> None:
        self.jobs = jobs
        self.manager = manager
        self.actor = actor

    def parse(self, document: Mapping[str, Any], source: str) -> ScheduledJob:
        """The ScheduledJob a document declares; ``ManifestError`` naming the field."""
        job = manifests.parse_document(dict(document), source)
        if job is None:
            raise manifests.ManifestError(
                f"{source}: not a {manifests.KIND}", field="kind", reason="not a ScheduledJob"
            )
        return job

    async def apply(self, job: ScheduledJob) -> Applied:
        stored = await self.jobs.put(
            job.tenant, job.name, job.spec, self.actor, manager=self.manager
        )
        if stored.change is Change.created:
            status = fresh_status(stored.definition)  # no runs yet: nothing to read
        else:
            key = (job.tenant, job.name)
            status = (await self.jobs.statuses([key]))[key]
        return Applied(job, stored.change, stored.definition, status)

    async def apply_object(self, document: Mapping[str, Any], source: str) -> Applied:
        """Parse and apply one object (``ManifestError`` if it is invalid: nothing is
        written then, and a job stored from an earlier valid spec keeps running)."""
        return await self.apply(self.parse(document, source))

    async def remove(self, tenant: str, name: str) -> Removed | None:
        """Delete the job if this declaration keeps it (None: nothing to delete)."""
        try:
            cancelled, requested = await self.jobs.delete(
                tenant, name, self.actor, manager=self.manager
            )
        except NotFound:
            return None
        return Removed(tenant, name, cancelled, requested)

    async def prune(
        self, declared: Collection[JobKey], tenants: Collection[str] | None = None
    ) -> list[Removed]:
        """Remove every job this declaration keeps in ``tenants`` (None: all) that is not
        in ``declared``."""
        wanted = set(declared)
        scope = None if tenants is None else sorted(tenants)
        removed: list[Removed] = []
        for tenant, name in await self.jobs.managed(self.manager, scope):
            if (tenant, name) in wanted:
                continue
            gone = await self.remove(tenant, name)
            if gone is not None:
                removed.append(gone)
        return removed


def fresh_status(definition: Definition) -> JobStatus:
    """The status of a definition just created: no run exists yet."""
    return JobStatus(
        tenant=definition.tenant,
        name=definition.name,
        shard=definition.shard,
        generation=definition.generation,
        paused=definition.paused,
        managed_by=definition.managed_by,
        next_run_time=None if definition.paused else definition.next_due_at,
        last_schedule_time=None,
        last_run_state=None,
        last_successful_time=None,
        active_runs=0,
        dead_runs=0,
        missed_runs_dropped=definition.missed_dropped,
        missed_caught_up=0,
        overlap_skipped=definition.overlap_skipped,
    )
