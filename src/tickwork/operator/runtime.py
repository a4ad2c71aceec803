"""The operator as one object a process (``tickwork operator``) or a test runs:
``await Operator(...).run(stop)`` until ``stop`` is set.

Every replica serves the admission webhook (a Kopf instance with the validating
handler only: validation reads nothing and writes nothing, so two replicas answering
is safe) and the health port. With a leader election (``leadership``), only the
leader runs the writing parts, for as long as it leads (a term): it lists the
ScheduledJobs it serves (seeding the object cache), starts Kopf's resource handlers
in-process (``kopf.spawn_tasks``/``run_tasks`` with a stop flag, as Kopf's own
embedding does), the status pass (its first pass reads every object's job again: the
previous leader may have drained changes it never wrote), the Event poster and the
webhook configuration keeper, and resyncs in the background: every object is
reconciled by Kopf's resume handlers, and a definition whose object is gone (deleted
while no operator ran, its finalizer removed by hand) is removed.

A term ends when the Lease is lost (the parts are cancelled at once; the Cluster's
writes are refused from the deadline on) or on stop (they stop cleanly, then the Lease
is released so the standby need not wait it out). Without an election the operator
leads from start to stop, as a single replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

import kopf

from tickwork.coordination.health import HealthServer, Readiness
from tickwork.coordination.leader import LeaderElection
from tickwork.core.records import Manager
from tickwork.core.settings import OperatorSettings, WebhookSettings
from tickwork.engine import outages, readiness
from tickwork.engine.jobs import Jobs
from tickwork.engine.reconcile import Reconciler
from tickwork.engine.status_feed import StatusFeed
from tickwork.operator import handlers, instances
from tickwork.operator.admission import ManagedWebhook
from tickwork.operator.cluster import Cluster, ClusterError, NotServed
from tickwork.operator.events import DeadRunNotices, EventRecorder
from tickwork.operator.leadership import OperatorMetrics
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
        # The caBundle of the client configs it yields (else the certificate itself).
        cafile=None if settings.ca_file is None else str(settings.ca_file),
    )


class Operator:
    def __init__(
        self,
        jobs: Jobs,
        cluster: Cluster,
        settings: OperatorSettings | None = None,
        *,
        now: Callable[[], datetime] | None = None,
        tune: Callable[[kopf.OperatorSettings], None] | None = None,
        election: LeaderElection | None = None,
    ) -> None:
        """``tune`` adjusts Kopf's own settings (tests shorten its timeouts);
        ``election``: lead only while it says so (None: lead from start to stop)."""
        self.jobs = jobs
        self.cluster = cluster
        self.settings = settings or OperatorSettings()
        self.tune = tune
        self.election = election
        if election is not None:
            cluster.may_write = lambda: election.leading
        self.metrics = OperatorMetrics()
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
        # The leader's Kopf: the resource handlers. Every replica's: admission only.
        self.registry = kopf.OperatorRegistry()
        handlers.register(self.registry, admission_webhook=False)
        self.admission_registry: kopf.OperatorRegistry | None = None
        self.webhook: ManagedWebhook | None = None
        if webhook.enabled:
            self.admission_registry = kopf.OperatorRegistry()
            handlers.register(self.admission_registry, resources=False)
            # Unmanaged, the configuration is the chart's; given the CA, its caBundle
            # is still the operator's to keep.
            keeps = webhook.manage or webhook.ca_file is not None
            self.webhook = ManagedWebhook(
                webhook_server(webhook),
                cluster if keeps else None,
                self.settings.namespaces,
                name=webhook.configuration,
                ca_bundle_only=not webhook.manage,
            )
        self.health: HealthServer | None = None
        self.test_signals = self.context.signals
        self.terms = 0  # leader terms started
        # Test signals.
        self.ready = asyncio.Event()  # leading: Kopf is watching and the cache is seeded
        self.resynced = asyncio.Event()  # gone objects' definitions removed
        self.admitting = asyncio.Event()  # the admission webhook serves
        self._kopf_running: asyncio.Task[None] | None = None
        self._admission_running: asyncio.Task[None] | None = None

    @property
    def leading(self) -> bool:
        return self.election is None or self.election.leading

    def kopf_settings(self, *, admission: bool = False) -> kopf.OperatorSettings:
        """Kopf's settings for the leader's instance, or (``admission``) for the
        instance that serves the webhook."""
        settings = kopf.OperatorSettings()
        # Bookkeeping in status, never annotations: GitOps tools see no drift.
        settings.persistence.progress_storage = kopf.StatusProgressStorage()
        settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage()
        settings.persistence.finalizer = handlers.FINALIZER
        # The CRD is known: no watch on CRDs and namespaces (nor the RBAC for it).
        settings.scanning.disabled = True
        # Events are the operator's own (events.py), none from Kopf's logs.
        settings.posting.enabled = False
        settings.admission.server = self.webhook if admission else None
        settings.admission.managed = None
        if self.tune is not None:
            self.tune(settings)
        return settings

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (or SIGTERM, or a Kopf instance stops); leading
        while the election says so; then stop cleanly and release the Lease."""
        namespaces = self.settings.namespaces
        logger.info(
            "serving ScheduledJobs in %s%s",
            ", ".join(namespaces) if namespaces else "every namespace",
            "" if self.election is None else f" as {self.election.identity}, if elected",
            extra={"action": "operator-start"},
        )
        election_stop = asyncio.Event()
        electing: asyncio.Task[None] | None = None
        admission_stop = asyncio.Event()
        try:
            if self.admission_registry is not None:
                self._admission_running = asyncio.create_task(self._admission(admission_stop))
            if self.election is not None:
                electing = asyncio.create_task(self.election.run(election_stop))
            if self.settings.health_port is not None:
                self.health = HealthServer(
                    self._readiness,
                    self.settings.health_bind,
                    self.settings.health_port,
                    metrics=self.metrics.render,
                )
                url = await self.health.start()
                logger.info(
                    "health on %s/healthz and %s/readyz",
                    url,
                    url,
                    extra={"action": "operator-health"},
                )
            while not stop.is_set() and not self._admission_ended():
                if self.election is not None and not await self._elected(stop):
                    break
                await self._term(stop)
        finally:
            # The writing parts have stopped (the term is over): now the Lease may go.
            election_stop.set()
            if electing is not None:
                with contextlib.suppress(Exception):
                    await electing
            admission_stop.set()
            if self._admission_running is not None:
                with contextlib.suppress(Exception):
                    await self._admission_running
            if self.health is not None:
                await self.health.stop()
            stop.set()
            logger.info("operator stopped", extra={"action": "operator-stop"})

    def _admission_ended(self) -> bool:
        """The admission instance stopped on its own (Kopf caught a signal, or failed):
        the process stops."""
        running = self._admission_running
        return running is not None and running.done()

    async def _elected(self, stop: asyncio.Event) -> bool:
        """Wait until this replica leads (True) or stops (False)."""
        assert self.election is not None
        waits = {
            asyncio.create_task(stop.wait()),
            asyncio.create_task(self.election.wait_leading()),
        }
        if self._admission_running is not None:
            waits.add(self._admission_running)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                if task is not self._admission_running:
                    task.cancel()
        return not stop.is_set() and not self._admission_ended() and self.leading

    async def _admission(self, stop: asyncio.Event) -> None:
        assert self.admission_registry is not None
        ready = asyncio.Event()
        running = asyncio.create_task(
            instances.run(
                ("admission", self),
                registry=self.admission_registry,
                settings=self.kopf_settings(admission=True),
                namespaces=self.settings.namespaces,
                stop_flag=stop,
                ready_flag=ready,
                memo=kopf.Memo(context=self.context),
            )
        )
        readying = asyncio.create_task(ready.wait())
        await asyncio.wait({readying, running}, return_when=asyncio.FIRST_COMPLETED)
        readying.cancel()
        if ready.is_set():
            self._catch_signals(stop)
            self.admitting.set()
            logger.info("serving admission", extra={"action": "operator-admission-ready"})
        try:
            await running
        finally:
            self.admitting.clear()

    async def _term(self, stop: asyncio.Event) -> None:
        """One term of leadership: the writing parts until ``stop``, the Lease lost or
        the leader's Kopf stopping on its own (SIGTERM)."""
        namespaces = self.settings.namespaces
        try:
            listed = await self.cluster.list_scheduled_jobs(namespaces)
        except ClusterError as error:
            if isinstance(error, NotServed) or (self.election is None and self.terms == 0):
                raise  # one clear line (no CRD; a lone operator that cannot start) and exit
            # A takeover while the API server has trouble: try again while leading.
            logger.warning(
                "cannot start leading (retrying in %.1f s): %s",
                self.settings.store_retry_seconds,
                error,
                extra={"action": "operator-lead-retry"},
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.store_retry_seconds)
            return
        self.terms += 1
        term = self.terms
        self.objects.reset(listed)
        # The previous leader may have drained changes it never wrote: read all again.
        self.status_pass.recheck(self._key(o) for o in listed)
        self.metrics.changed("acquired")
        logger.info(
            "leading: %d ScheduledJob(s) in %s",
            len(listed),
            ", ".join(namespaces) if namespaces else "every namespace",
            extra={"action": "operator-lead", "term": term},
        )
        kopf_stop = asyncio.Event()
        kopf_ready = asyncio.Event()
        kopf_running = asyncio.create_task(
            instances.run(
                ("leader", self, term),
                registry=self.registry,
                settings=self.kopf_settings(),
                namespaces=namespaces,
                stop_flag=kopf_stop,
                ready_flag=kopf_ready,
                memo=kopf.Memo(context=self.context),
            )
        )
        self._kopf_running = kopf_running
        own_stop = asyncio.Event()
        own: list[asyncio.Task[None]] = [
            asyncio.create_task(self.events.run(own_stop)),
            asyncio.create_task(self.status_pass.run(own_stop)),
            asyncio.create_task(self._resync({self._key(o) for o in listed}, own_stop)),
        ]
        if self.webhook is not None:
            self.webhook.rewrite()  # the configuration the previous leader wrote is its own
            own.append(asyncio.create_task(self.webhook.keep(own_stop)))
        lost = False
        try:
            stopping = asyncio.create_task(stop.wait())
            losing = asyncio.create_task(self._lost())
            readying = asyncio.create_task(kopf_ready.wait())
            ends = {stopping, losing, kopf_running}
            await asyncio.wait(ends | {readying}, return_when="FIRST_COMPLETED")
            if readying.done() and not any(end.done() for end in ends):
                self._catch_signals(stop)
                self.ready.set()
                logger.info("watching ScheduledJobs", extra={"action": "operator-ready"})
                await asyncio.wait(ends, return_when="FIRST_COMPLETED")
            lost = losing.done() and not stop.is_set()
            for task in (stopping, losing, readying):
                task.cancel()
        finally:
            self.ready.clear()
            kopf_stop.set()
            if lost:
                # No grace: the handlers in flight are cancelled, their writes refused.
                kopf_running.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await kopf_running
            own_stop.set()
            for task in own:
                if lost:
                    task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._kopf_running = None
            self.metrics.changed("lost" if lost else "released")
            logger.info(
                "term %d over: %s",
                term,
                "the Lease is lost" if lost else "stopping",
                extra={"action": "operator-term-end", "term": term},
            )
        if kopf_running.done() and not lost and not stop.is_set():
            stop.set()  # Kopf stopped on its own (a signal, or it failed): so do we

    async def _lost(self) -> None:
        if self.election is None:
            await asyncio.Event().wait()
            return
        await self.election.wait_standing_by()

    def _catch_signals(self, stop: asyncio.Event) -> None:
        """Each Kopf instance takes SIGINT and SIGTERM for its own stop flag at start;
        one that ended (a term lost) would then leave them unanswered. They stop the
        whole operator."""
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(number, stop.set)

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
                    if not self.leading:
                        return
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

    async def _readiness(self) -> Readiness:
        """The leader is ready while it watches and a shard serves (``degraded``, naming
        the shards that do not, while some do not: engine.readiness); a standby
        while it reaches the Lease (it could take over) and serves admission (when the
        webhook is on); either also needs the webhook serving."""
        role = "leader" if self.leading else "standby"
        body: dict[str, Any] = {"role": role}
        if self.election is not None:
            body["identity"] = self.election.identity
        if self.webhook is not None and not self.admitting.is_set():
            return False, {
                "status": "starting",
                "detail": "the admission webhook is not serving yet",
                **body,
            }
        if role == "standby":
            assert self.election is not None
            if not self.election.reachable:
                never = self.election.last_answer is None
                return False, {
                    "status": "starting" if never else "unavailable",
                    "detail": "no try for the Lease yet"
                    if never
                    else "the Lease could not be read lately",
                    **body,
                }
            return True, {"status": "ready", **body}
        running = self._kopf_running
        if not self.ready.is_set() or running is None or running.done():
            return False, {"status": "starting", "detail": "not watching ScheduledJobs yet", **body}
        try:
            async with asyncio.timeout(2):
                found = await readiness.check(
                    self.jobs.database, self.settings.readiness_timeout_seconds
                )
        except TimeoutError:
            detail = "the store did not answer within 2 s"
            return False, {"status": "unavailable", "detail": detail, **body}
        if not found.ready:
            return False, {"status": "unavailable", "detail": "; ".join(found.problems), **body}
        if found.problems:
            # Objects on the other shards are reconciled; those on these show
            # StoreUnavailable until their shard serves again.
            shards = {"problems": list(found.problems), "down": list(found.down)}
            return True, {"status": "degraded", **shards, **body}
        return True, {"status": "ready", **body}
