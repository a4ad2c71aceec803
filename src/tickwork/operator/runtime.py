"""The operator as one object a process (``tickwork operator``) or a test runs:
``await Operator(...).run(stop)`` until ``stop`` is set.

At start it lists the ScheduledJobs it serves (seeding the object cache), starts Kopf
in-process (``kopf.spawn_tasks``/``run_tasks`` with a stop flag, as Kopf's own
embedding does), the status pass, the Event poster, the webhook configuration keeper
and the health server, and resyncs in the background: every object is reconciled by
Kopf's resume handlers, and a definition whose object is gone (deleted while no
operator ran, its finalizer removed by hand) is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Collection, Iterator
from datetime import UTC, datetime
from typing import Any, Final

import kopf

from tickwork.core.records import Manager
from tickwork.core.settings import OperatorSettings, WebhookSettings
from tickwork.engine import outages, readiness
from tickwork.engine.jobs import Jobs
from tickwork.engine.reconcile import Reconciler
from tickwork.engine.status_feed import StatusFeed
from tickwork.operator import handlers, health
from tickwork.operator.admission import ManagedWebhook
from tickwork.operator.cluster import Cluster, ClusterError
from tickwork.operator.events import DeadRunNotices, EventRecorder
from tickwork.operator.objects import ObjectCache
from tickwork.operator.refresh import StatusPass

logger = logging.getLogger("tickwork.operator")

ACTOR: Final = "operator"


def webhook_server(settings: WebhookSettings) -> kopf.WebhookServer:
    """Kopf's webhook server as ``settings`` say (``port`` None: any free port)."""
    return kopf.WebhookServer(
        addr=settings.bind,
        port=settings.port,
        host=settings.host,
        insecure=settings.insecure,
        certfile=None if settings.cert_file is None else str(settings.cert_file),
        pkeyfile=None if settings.key_file is None else str(settings.key_file),
    )


class _NotKopf(Collection["asyncio.Task[Any]"]):
    """Every task whose coroutine is not Kopf's, for ``kopf.run_tasks(ignored=...)``:
    Kopf treats every task created after its start as its own and cancels it at exit;
    the operator's own tasks (status pass, health server) and those of whatever else
    shares the event loop stop on their own."""

    def __contains__(self, task: object) -> bool:
        if not isinstance(task, asyncio.Task):
            return False
        code = getattr(task.get_coro(), "cr_code", None)
        return code is None or "/kopf/" not in code.co_filename.replace("\\", "/")

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(())

    def __len__(self) -> int:
        return 0


class Operator:
    def __init__(
        self,
        jobs: Jobs,
        cluster: Cluster,
        settings: OperatorSettings | None = None,
        *,
        now: Callable[[], datetime] | None = None,
        tune: Callable[[kopf.OperatorSettings], None] | None = None,
    ) -> None:
        """``tune`` adjusts Kopf's own settings (tests shorten its timeouts)."""
        self.jobs = jobs
        self.cluster = cluster
        self.settings = settings or OperatorSettings()
        self.tune = tune
        self.objects = ObjectCache()
        self.reconciler = Reconciler(jobs, Manager.kubernetes, ACTOR)
        self.events = EventRecorder(cluster, instance=socket.gethostname(), clock=now)
        self.status_pass = StatusPass(
            StatusFeed(jobs.database, Manager.kubernetes),
            jobs.database.shard_count,
            self.objects,
            cluster,
            self.events,
            namespaces=self.settings.namespaces,
            interval=self.settings.status_interval,
            notices=DeadRunNotices(),
        )
        self.context = handlers.Context(
            reconciler=self.reconciler,
            objects=self.objects,
            events=self.events,
            login=cluster.connection_info,
            now=now or (lambda: datetime.now(UTC)),
            store_retry_seconds=self.settings.store_retry_seconds,
            slots_per_shard=jobs.database.settings.max_size,
        )
        webhook = self.settings.webhook
        self.registry = kopf.OperatorRegistry()
        handlers.register(self.registry, admission_webhook=webhook.enabled)
        self.webhook: ManagedWebhook | None = None
        if webhook.enabled:
            self.webhook = ManagedWebhook(
                webhook_server(webhook),
                cluster if webhook.manage else None,
                self.settings.namespaces,
            )
        self.health: health.HealthServer | None = None
        self.test_signals = self.context.signals
        # Test signals.
        self.ready = asyncio.Event()  # Kopf is watching and the cache is seeded
        self.resynced = asyncio.Event()  # gone objects' definitions removed

    def kopf_settings(self) -> kopf.OperatorSettings:
        settings = kopf.OperatorSettings()
        # Bookkeeping in status, never annotations: GitOps tools see no drift.
        settings.persistence.progress_storage = kopf.StatusProgressStorage()
        settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage()
        settings.persistence.finalizer = handlers.FINALIZER
        # The CRD is known: no watch on CRDs and namespaces (nor the RBAC for it).
        settings.scanning.disabled = True
        # Events are the operator's own (events.py), none from Kopf's logs.
        settings.posting.enabled = False
        settings.admission.server = self.webhook
        settings.admission.managed = None
        if self.tune is not None:
            self.tune(settings)
        return settings

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (or Kopf stops, as on SIGTERM); then stop cleanly."""
        namespaces = self.settings.namespaces
        listed = await self.cluster.list_scheduled_jobs(namespaces)
        self.objects.seed(listed)
        logger.info(
            "serving %d ScheduledJob(s) in %s",
            len(listed),
            ", ".join(namespaces) if namespaces else "every namespace",
            extra={"action": "operator-start"},
        )
        kopf_stop = asyncio.Event()
        kopf_ready = asyncio.Event()
        tasks = await kopf.spawn_tasks(
            registry=self.registry,
            settings=self.kopf_settings(),
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            stop_flag=kopf_stop,
            ready_flag=kopf_ready,
            memo=kopf.Memo(context=self.context),
        )
        kopf_running = asyncio.create_task(kopf.run_tasks(tasks, ignored=_NotKopf()))
        own_stop = asyncio.Event()
        own: list[asyncio.Task[None]] = [
            asyncio.create_task(self.events.run(own_stop)),
            asyncio.create_task(self.status_pass.run(own_stop)),
            asyncio.create_task(self._resync({self._key(o) for o in listed}, own_stop)),
        ]
        if self.webhook is not None:
            own.append(asyncio.create_task(self.webhook.keep(own_stop)))
        try:
            if self.settings.health_port is not None:
                self.health = health.HealthServer(
                    watching=lambda: self.ready.is_set() and not kopf_running.done(),
                    store=self._store_problem,
                    host=self.settings.health_bind,
                    port=self.settings.health_port,
                )
                url = await self.health.start()
                logger.info(
                    "health on %s/healthz and %s/readyz",
                    url,
                    url,
                    extra={"action": "operator-health"},
                )
            stopping = asyncio.create_task(stop.wait())
            readying = asyncio.create_task(kopf_ready.wait())
            await asyncio.wait({stopping, kopf_running, readying}, return_when="FIRST_COMPLETED")
            if readying.done() and not stop.is_set():
                self.ready.set()
                logger.info("watching ScheduledJobs", extra={"action": "operator-ready"})
                await asyncio.wait({stopping, kopf_running}, return_when="FIRST_COMPLETED")
            readying.cancel()
            stopping.cancel()
        finally:
            kopf_stop.set()
            with contextlib.suppress(Exception):
                await kopf_running
            own_stop.set()
            for task in own:
                with contextlib.suppress(Exception):
                    await task
            if self.health is not None:
                await self.health.stop()
            stop.set()
            logger.info("operator stopped", extra={"action": "operator-stop"})

    @staticmethod
    def _key(body: dict[str, Any]) -> tuple[str, str]:
        meta = body.get("metadata") or {}
        return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    async def _resync(self, listed: set[tuple[str, str]], stop: asyncio.Event) -> None:
        """Remove the definitions whose object is gone; retried while the store is out."""
        scope = list(self.settings.namespaces) or None
        while not stop.is_set():
            try:
                candidates = await self.jobs.managed(Manager.kubernetes, scope)
                for tenant, name in candidates:
                    key = (tenant, name)
                    if key in listed or self.objects.get(key) is not None:
                        continue
                    # Asked one by one: an object made since the listing is kept.
                    if await self.cluster.get_scheduled_job(tenant, name) is not None:
                        continue
                    removed = await self.reconciler.remove(tenant, name)
                    if removed is not None:
                        logger.info(
                            "deleted job %s/%s: its ScheduledJob is gone "
                            "(%d pending run(s) cancelled)",
                            tenant,
                            name,
                            removed.cancelled,
                            extra={"action": "operator-resync-delete"},
                        )
            except Exception as error:
                if not (isinstance(error, ClusterError) or outages.is_outage(error)):
                    raise
                logger.warning(
                    "resync waits for the store and the API server: %s",
                    outages.describe(error),
                    extra={"action": "operator-resync-retry"},
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.settings.store_retry_seconds)
                continue
            self.resynced.set()
            return

    async def _store_problem(self) -> str | None:
        found = await readiness.check(self.jobs.database, self.settings.readiness_timeout_seconds)
        return "; ".join(found.problems) or None
