"""Keep the jobs declared in a folder of ScheduledJob YAML in the store.

``tickwork dev --manifests`` runs it on every change of the folder. The rules are the
ones a GitOps reconciler follows:

- a job comes from one file; another file declaring it too is refused (logged), and
  the job keeps coming from the file that declared it first, whatever the path order;
- a job whose file is removed, or no longer declares it, is deleted (pending runs
  cancelled, history kept);
- a broken file (unreadable YAML, an invalid document) is refused whole, and the jobs
  it declared before it broke are kept as they were, until it is fixed or removed.
  Nothing else waits for it: other files' changes and deletions take effect;
- a job whose spec did not change is not written (no generation bump, no audit entry);
- the jobs it stores are marked as kept by the manifests (the HTTP API refuses to change
  them), and the first sync with no broken file removes the ones no file declares any
  more (their file went away while tickwork dev was stopped).

It goes through the engine's reconcile core, as the operator does with ScheduledJob
objects: one path from a ScheduledJob to a stored definition.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tickwork.core.records import Manager
from tickwork.engine import manifests
from tickwork.engine.jobs import Change, Jobs
from tickwork.engine.manifests import JobKey, ScheduledJob
from tickwork.engine.reconcile import Reconciler
from tickwork.store import outages

logger = logging.getLogger("tickwork.manifests")

ACTOR: Final = "manifests"


@dataclass(frozen=True, slots=True)
class _Applied:
    path: Path
    job: ScheduledJob


class ManifestSync:
    def __init__(self, jobs: Jobs, folder: Path, actor: str = ACTOR) -> None:
        self.jobs = jobs
        self.folder = folder
        self.reconciler = Reconciler(jobs, Manager.manifests, actor)
        # What is in the store, as this process last wrote it, and the file it came from.
        self._applied: dict[JobKey, _Applied] = {}
        self._pruned = False
        # Test signal: set once the watch is looking at the folder.
        self.watching = asyncio.Event()

    @property
    def known(self) -> dict[JobKey, ScheduledJob]:
        return {key: applied.job for key, applied in self._applied.items()}

    @property
    def queues(self) -> list[str]:
        return sorted({job.spec.queue for job in self.known.values()} | {"default"})

    async def sync(self) -> None:
        scan = manifests.scan_folder(self.folder)
        owners = {key: applied.path for key, applied in self._applied.items()}
        chosen, duplicates = manifests.resolve(scan, owners)
        for message in [*scan.broken.values(), *duplicates]:
            logger.error("manifest refused: %s", message, extra={"action": "manifest-error"})
        wanted = {key: _Applied(d.path, d.job) for key, d in chosen.items()}
        for key, applied in self._applied.items():
            if applied.path in scan.broken:  # kept as it was until the file is fixed
                wanted[key] = applied
        for key, target in wanted.items():
            before = self._applied.get(key)
            if before is not None and before.job.spec == target.job.spec:
                self._applied[key] = target  # at most its file moved
                continue
            job = target.job
            outcome = await self.reconciler.apply(job)
            self._applied[key] = target
            level = logging.DEBUG if outcome.change is Change.unchanged else logging.INFO
            logger.log(
                level,
                "%s job %s/%s from %s",
                outcome.change.value,
                job.tenant,
                job.name,
                job.source,
                extra={"action": "manifest-apply"},
            )
        for key in sorted(set(self._applied) - set(wanted)):
            # Gone already (another declaration took it over): the outcome is the same.
            await self.reconciler.remove(*key)
            del self._applied[key]
            logger.info(
                "deleted job %s/%s (its manifest is gone)",
                *key,
                extra={"action": "manifest-delete"},
            )
        if not self._pruned and not scan.broken:
            # Only when every file could be read: a broken file's jobs are kept as they
            # were, and which jobs those are is known only once it was read.
            for removed in await self.reconciler.prune(set(wanted)):
                logger.info(
                    "deleted job %s/%s (no manifest declares it any more)",
                    removed.tenant,
                    removed.name,
                    extra={"action": "manifest-delete"},
                )
            self._pruned = True

    async def watch(self, stop: asyncio.Event, retry_seconds: float = 2.0) -> None:
        """Sync on every change until ``stop``. A sync cut short by a store outage is
        tried again every ``retry_seconds`` until it goes through, changes or not."""
        from watchfiles import awatch

        pending = False
        async for changes in awatch(
            self.folder,
            stop_event=stop,
            debounce=300,
            rust_timeout=max(1, round(retry_seconds * 1000)),
            yield_on_timeout=True,
        ):
            self.watching.set()
            if changes or pending:
                pending = not await self._try_sync()

    async def _try_sync(self) -> bool:
        """One sync; False when the store was unavailable (worth another try). What
        was applied before it stopped is recorded job by job."""
        try:
            await self.sync()
        except Exception as error:
            if not outages.is_outage(error):
                logger.exception(
                    "manifest sync failed; it runs again at the next change",
                    extra={"action": "manifest-sync-error"},
                )
                return True
            logger.warning(
                "manifest sync postponed, the store is unavailable: %s",
                outages.describe(error),
                extra={"action": "manifest-retry"},
            )
            return False
        return True
