"""The job-runner: lease the runs of container jobs, run each attempt as a Kubernetes
Job, and report how it ended.

For each leased run it reads the ScheduledJob (namespace = tenant, name = job; from a
watched cache), creates the Job of that attempt (``manifest.build``; its name comes
from the run id and the attempt, so creating it twice finds the first), and follows
it: heartbeats while it runs, completes the run when it ends (succeeded on
``Complete``; failed on ``Failed``, with the Job's reason and the last container's
termination message), deletes it when the run is cancelled or the lease is lost.

The Jobs are the runner's memory: every Job carries its run, attempt and fencing
token. A runner that starts (after a crash, a rollout) takes up the Jobs of its
queues that it finds: a lease still held is heartbeaten and the Job followed to its
end; a Job whose lease is lost is fenced off (deleted if it still runs, never
completed). A newer attempt's lease also fences off the older attempts' Jobs still
running. So a run has at most one Job per attempt, and at most one running.

Stopping (SIGTERM) leaves the Jobs running and the leases held: the next runner takes
them up, or their leases run out and tickwork retries the runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from tickwork.core import containers, limits, spec
from tickwork.core.backoff import Backoff
from tickwork.core.backoff import ceiling as backoff_ceiling
from tickwork.core.testsignal import Signals, TestSignal
from tickwork.jobrunner import manifest
from tickwork.jobrunner.kube import (
    Informer,
    Kube,
    KubeError,
    events_path,
    jobs_path,
    pods_path,
    scheduled_jobs_path,
)
from tickwork.jobrunner.manifest import State
from tickwork.jobrunner.metrics import RunnerMetrics
from tickwork.jobrunner.settings import JobRunnerSettings, default_identity
from tickwork.worker.client import (
    Beat,
    Completion,
    Extended,
    Lease,
    Outcome,
    Problem,
    WorkerClient,
    is_transient,
)

log: Final = logging.getLogger("tickwork.jobrunner")

COMPONENT: Final = "tickwork-job-runner"
EVENT_CREATED: Final = "JobCreated"
EVENT_FAILED: Final = "JobFailed"
# Kubernetes' refusals of a Job as written: another attempt would be refused alike.
_REFUSED: Final = frozenset({400, 422})

# A test's hook at each step of an attempt: ("creating" | "created" | "heartbeat" |
# "finished", the Job's name). A test that never returns from it has the runner killed
# at that step.
Checkpoint = Callable[[str, str], Awaitable[None]]


@dataclass
class RunnerSignals(Signals):
    """What a test can wait on (``runner.test_signals.init()`` before ``run()``)."""

    created: TestSignal[str] = field(default_factory=lambda: TestSignal("created"))
    """A Job was created (its name)."""

    adopted: TestSignal[str] = field(default_factory=lambda: TestSignal("adopted"))
    """A Job found at start is followed, its lease still held (its name)."""

    fenced: TestSignal[str] = field(default_factory=lambda: TestSignal("fenced"))
    """A Job's lease is lost: it was deleted if it ran, and is no longer touched."""

    completed: TestSignal[tuple[str, str]] = field(default_factory=lambda: TestSignal("completed"))
    """A run's completion was answered: (run id, the state it ended in or "dropped")."""

    extended: TestSignal[str] = field(default_factory=lambda: TestSignal("extended"))
    """A heartbeat extended a run's lease (the run id)."""


@dataclass(eq=False)
class Held:
    """A run whose lease this runner holds, and its Job."""

    lease: Lease
    name: str  # the Job's
    next_beat: float = 0.0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    failures: int = 0  # heartbeats in a row that did not go through

    @property
    def key(self) -> tuple[str, str]:
        return (self.lease.tenant, self.name)


class JobRunner:
    """Leases runs of ``settings.queues`` and runs them as Jobs in
    ``settings.namespaces``; ``run(stop)`` until ``stop`` is set."""

    def __init__(
        self,
        client: WorkerClient,
        kube: Kube,
        settings: JobRunnerSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if not settings.namespaces:
            raise ValueError("a job-runner serves at least one namespace")
        self.client = client
        self.kube = kube
        self.settings = settings
        self.clock = clock
        self.rng = rng or random.Random()
        self.namespaces = frozenset(settings.namespaces)
        self.jobs = Informer(
            kube,
            "Jobs",
            jobs_path,
            settings.namespaces,
            selector=f"{containers.LABEL_RUN},"
            f"{containers.LABEL_MANAGED_BY}={containers.MANAGED_BY}",
            on_change=self._job_changed,
            rng=self.rng,
        )
        self.scheduled_jobs = Informer(
            kube, "ScheduledJobs", scheduled_jobs_path, settings.namespaces, rng=self.rng
        )
        self.held: dict[str, Held] = {}  # by run id
        self.metrics = RunnerMetrics()
        self.test_signals = RunnerSignals()
        self.checkpoint: Checkpoint | None = None
        self.leasing = False  # the last lease call went through
        self.identity = settings.identity or default_identity()
        self.metrics.track(lambda: len(self.held), self.ready)
        self._by_job: dict[tuple[str, str], Held] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()

    @property
    def interval(self) -> float:
        """Between heartbeats of a held run."""
        return self.settings.lease_seconds / 3

    def ready(self) -> bool:
        return self.jobs.synced.is_set() and self.scheduled_jobs.synced.is_set() and self.leasing

    def wake(self) -> None:
        """Look at every held run again now (a test that moved the clock calls it)."""
        for held in self.held.values():
            held.changed.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Take up the Jobs found, then lease and follow runs until ``stop``."""
        watching = [
            asyncio.create_task(self.jobs.run(), name="tickwork-jobs-watch"),
            asyncio.create_task(self.scheduled_jobs.run(), name="tickwork-scheduledjobs-watch"),
        ]
        try:
            synced = asyncio.gather(self.jobs.synced.wait(), self.scheduled_jobs.synced.wait())
            if not await _first(synced, stop):
                return
            log.info(
                "job-runner %s: leasing %s for namespaces %s",
                self.identity,
                ",".join(self.settings.queues),
                ",".join(self.settings.namespaces),
                extra={"action": "start"},
            )
            await self._adopt()
            await self._lease_loop(stop)
        finally:
            # Nothing is completed, deleted or given back: the Jobs run on, the next
            # runner takes them up (or the leases run out and the runs are retried).
            tasks = [*watching, *self._tasks]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            log.info("job-runner %s stopped", self.identity, extra={"action": "stopped"})

    # Leasing

    async def _lease_loop(self, stop: asyncio.Event) -> None:
        settings = self.settings
        backoff = Backoff(settings.retry_base_seconds, settings.retry_max_seconds, self.rng)
        while not stop.is_set():
            free = settings.max_jobs - len(self.held)
            if free <= 0:
                self._slot_freed.clear()
                await _first(self._slot_freed.wait(), stop)
                continue
            call = self.client.lease(
                settings.queues,
                max_runs=min(free, limits.MAX_LEASE_BATCH),
                wait_seconds=settings.wait_seconds,
                lease_seconds=settings.lease_seconds,
                worker_id=self.identity,
            )
            try:
                leases = await _first(call, stop)
            except Exception as error:
                self.leasing = False
                if not is_transient(error):
                    log.error(
                        "the API refused the lease call: %s",
                        error,
                        extra={"action": "lease-refused"},
                    )
                    raise
                self.metrics.api_errors.labels("tickwork").inc()
                delay = backoff.next_delay()
                log.warning(
                    "lease call failed (%s); again in %.2fs",
                    error,
                    delay,
                    extra={"action": "api-retry", "call": "lease"},
                )
                await _first(asyncio.sleep(delay), stop)
                continue
            if leases is None:
                return  # stopped while waiting
            self.leasing = True
            backoff.reset()
            for lease in leases:
                name = containers.job_name(lease.job, lease.run_id, lease.attempt)
                self._follow(Held(lease, name, self.clock() + self.interval), fresh=True)

    def _follow(self, held: Held, *, fresh: bool) -> None:
        self.held[held.lease.run_id] = held
        self._by_job[held.key] = held
        task = asyncio.create_task(self._attempt(held, fresh), name=f"tickwork-job-{held.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _release(self, held: Held) -> None:
        if self.held.get(held.lease.run_id) is held:
            del self.held[held.lease.run_id]
        if self._by_job.get(held.key) is held:
            del self._by_job[held.key]
        self._slot_freed.set()

    def _job_changed(self, namespace: str, name: str, _obj: dict[str, Any] | None) -> None:
        held = self._by_job.get((namespace, name))
        if held is not None:
            held.changed.set()

    # One attempt

    async def _attempt(self, held: Held, fresh: bool) -> None:
        try:
            if fresh and not await self._create(held):
                return
            await self._watch(held)
        except Exception:
            # The lease runs out and tickwork retries the run; the next runner fences
            # this attempt's Job off.
            log.exception(
                "run %s: giving up on Job %s",
                held.lease.run_id,
                held.name,
                extra={"action": "attempt-failed", "run_id": held.lease.run_id},
            )
        finally:
            self._release(held)

    async def _create(self, held: Held) -> bool:
        """Make the attempt's Job; False when the run was completed instead (a dry run,
        nothing to run, a Job Kubernetes refuses)."""
        lease = held.lease
        where = f"{lease.tenant}/{lease.job}"
        if lease.tenant not in self.namespaces:
            served = ", ".join(sorted(self.namespaces))
            await self._fail(held, f"namespace {lease.tenant} is not served here ({served})")
            return False
        scheduled_job = await self._scheduled_job(lease.tenant, lease.job)
        if scheduled_job is None:
            await self._fail(
                held,
                f"no ScheduledJob {where}: container jobs are declared as ScheduledJobs",
                retryable=False,
            )
            return False
        try:
            job_spec = spec.parse(spec.JobSpec, scheduled_job.get("spec") or {})
        except ValidationError as error:
            first = error.errors()[0]
            problem = f"{spec.error_field(first) or 'spec'}: {spec.error_message(first)}"
            await self._fail(held, f"ScheduledJob {where} is invalid: {problem}", retryable=False)
            return False
        if job_spec.job_template is None:
            await self._fail(
                held, f"ScheduledJob {where} has no jobTemplate: nothing to run", retryable=False
            )
            return False
        if lease.dry_run:
            log.info(
                "run %s attempt %d: dry run, Job %s not created",
                lease.run_id,
                lease.attempt,
                held.name,
                extra={"action": "dry-run", "run_id": lease.run_id, "job": held.name},
            )
            await self._complete(held, "succeeded")
            return False
        await self._fence_older(lease)
        body = manifest.build(
            lease,
            scheduled_job,
            job_spec.job_template,
            job_spec.timeout_seconds,
            self.settings.job_ttl_seconds,
        )
        await self._step("creating", held)
        try:
            created = await self.kube.call(
                f"create Job {held.name}", "POST", jobs_path(lease.tenant), body=body
            )
        except KubeError as error:
            return await self._not_created(held, error)
        self.jobs.observe(created)
        self.metrics.jobs.labels("created").inc()
        self.test_signals.created.signal(held.name)
        self._event(
            lease,
            EVENT_CREATED,
            f"created Job {held.name} for run {lease.run_id}, attempt {lease.attempt}",
        )
        log.info(
            "run %s attempt %d: Job %s created",
            lease.run_id,
            lease.attempt,
            held.name,
            extra={"action": "job-created", "run_id": lease.run_id, "job": held.name},
        )
        await self._step("created", held)
        return True

    async def _not_created(self, held: Held, error: KubeError) -> bool:
        lease = held.lease
        if error.reason == "AlreadyExists":
            # Leased again (or created by a runner that died before it could tell):
            # the Job of this attempt is there already, and stays the only one.
            found = await self._read_job(lease.tenant, held.name)
            attempt = None if found is None else manifest.attempt_of(found)
            if (
                found is not None
                and attempt is not None
                and (attempt.run_id, attempt.attempt) == (lease.run_id, lease.attempt)
            ):
                self.jobs.observe(found)
                return True
            await self._fail(
                held, f"a Job named {held.name} exists and is not this attempt's", retryable=False
            )
            return False
        refused = error.status in _REFUSED
        await self._fail(held, f"Kubernetes refused the Job: {error}", retryable=not refused)
        return False

    async def _fence_older(self, lease: Lease) -> None:
        """Delete the running Jobs of this run's earlier attempts: their leases are gone,
        since this one is newer."""
        for (namespace, _), job in list(self.jobs.objects.items()):
            attempt = manifest.attempt_of(job)
            if (
                namespace == lease.tenant
                and attempt is not None
                and attempt.run_id == lease.run_id
                and attempt.attempt < lease.attempt
                and manifest.state_of(job) is State.active
            ):
                await self._delete(job, f"attempt {lease.attempt} of run {lease.run_id} is leased")
                self.metrics.jobs.labels("fenced").inc()
                self.test_signals.fenced.signal(attempt.name)

    async def _watch(self, held: Held) -> None:
        """Follow the Job until it ends, heartbeating; then complete the run."""
        lease = held.lease
        while True:
            job = self.jobs.get(lease.tenant, held.name)
            if job is None:
                # The cache may not hold it yet (listed before it was made): ask.
                job = await self._read_job(lease.tenant, held.name)
                if job is not None:
                    self.jobs.observe(job)
            state = manifest.state_of(job)
            if state is not State.active:
                break
            wait = held.next_beat - self.clock()
            if wait <= 0:
                await self._step("heartbeat", held)
                if not await self._beat(held, job):
                    return
                continue
            held.changed.clear()
            # Not wait_for: on Python 3.11 it swallows a cancel that meets a set event.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await held.changed.wait()
        await self._step("finished", held)
        if state is State.succeeded:
            await self._complete(held, "succeeded")
            return
        if state is State.gone:
            await self._fail(held, f"Job {held.name} was deleted before it finished")
            return
        assert job is not None
        pods = await self._pods(lease)
        message = manifest.error_message(held.name, job, pods)
        self._event(lease, EVENT_FAILED, message, warning=True)
        await self._fail(held, message)

    async def _beat(self, held: Held, job: dict[str, Any] | None) -> bool:
        """Extend the lease; False when the run is over for this runner (cancelled:
        its Job deleted and the run completed; lost: fenced off)."""
        lease = held.lease
        beat = Beat(lease.run_id, lease.fencing_token, self.settings.lease_seconds)
        try:
            [answer] = await self.client.heartbeat_many([beat])
        except Exception as error:
            self.metrics.api_errors.labels("tickwork").inc()
            log.warning(
                "heartbeat of %s failed: %s", lease.run_id, error, extra={"action": "api-retry"}
            )
            held.next_beat = self.clock() + self._beat_retry(held)
            return True
        if isinstance(answer, Problem):
            if answer.lease_lost:
                await self._fenced(held, job, answer.detail)
                return False
            log.warning(
                "heartbeat of %s refused: %s",
                lease.run_id,
                answer.detail,
                extra={"action": "heartbeat-refused", "run_id": lease.run_id},
            )
            held.next_beat = self.clock() + self._beat_retry(held)
            return True
        held.failures = 0
        held.next_beat = self.clock() + self.interval
        self.test_signals.extended.signal(lease.run_id)
        if answer.cancel_requested:
            log.info(
                "run %s cancelled: deleting Job %s",
                lease.run_id,
                held.name,
                extra={"action": "cancel-requested", "run_id": lease.run_id, "job": held.name},
            )
            if job is not None:
                await self._delete(job, "the run was cancelled")
            # A cancelled run ends `cancelled` whatever the outcome says.
            await self._fail(held, f"cancelled: Job {held.name} deleted")
            return False
        return True

    async def _fenced(self, held: Held, job: dict[str, Any] | None, why: str) -> None:
        """The lease is lost (reaped, or a newer attempt holds the run): stop the Job if
        it still runs, and touch nothing of the run again."""
        lease = held.lease
        log.warning(
            "run %s: lease lost (%s); Job %s fenced off",
            lease.run_id,
            why,
            held.name,
            extra={"action": "lease-lost", "run_id": lease.run_id, "job": held.name},
        )
        if job is not None and manifest.state_of(job) is State.active:
            await self._delete(job, "its lease is lost")
        self.metrics.jobs.labels("fenced").inc()
        self.test_signals.fenced.signal(held.name)

    # Taking up the Jobs found at start

    async def _adopt(self) -> None:
        found: list[Held] = []
        for job in list(self.jobs.objects.values()):
            attempt = manifest.attempt_of(job)
            if attempt is None or attempt.queue not in self.settings.queues:
                continue  # another runner's queue
            held = Held(attempt.lease(), attempt.name)
            if attempt.run_id not in self.held:
                found.append(held)
        for start in range(0, len(found), limits.MAX_HEARTBEAT_BATCH):
            batch = found[start : start + limits.MAX_HEARTBEAT_BATCH]
            beats = [
                Beat(h.lease.run_id, h.lease.fencing_token, self.settings.lease_seconds)
                for h in batch
            ]
            try:
                answers: Sequence[Extended | Problem | None] = await self.client.heartbeat_many(
                    beats
                )
            except Exception as error:
                log.warning(
                    "cannot take up %d Job(s) yet: %s", len(batch), error, extra={"action": "adopt"}
                )
                answers = [None] * len(batch)
            for held, answer in zip(batch, answers, strict=True):
                seen = self.jobs.get(*held.key)
                if isinstance(answer, Problem) and answer.lease_lost:
                    if seen is not None and manifest.state_of(seen) is State.active:
                        await self._fenced(held, seen, answer.detail)
                    continue
                # Held (or not known yet: the first heartbeat decides).
                held.next_beat = self.clock()
                if isinstance(answer, Extended) and not answer.cancel_requested:
                    held.next_beat += self.interval
                self.metrics.jobs.labels("adopted").inc()
                self.test_signals.adopted.signal(held.name)
                log.info(
                    "run %s attempt %d: following Job %s again",
                    held.lease.run_id,
                    held.lease.attempt,
                    held.name,
                    extra={"action": "job-adopted", "run_id": held.lease.run_id},
                )
                self._follow(held, fresh=False)

    # Reporting

    async def _fail(self, held: Held, message: str, *, retryable: bool = True) -> None:
        await self._complete(held, "failed", message, retryable=retryable)

    async def _complete(
        self, held: Held, outcome: Outcome, message: str | None = None, *, retryable: bool = True
    ) -> None:
        lease = held.lease
        completion = Completion(lease.run_id, lease.fencing_token, outcome, message, retryable)
        settings = self.settings
        backoff = Backoff(settings.retry_base_seconds, settings.retry_max_seconds, self.rng)
        while True:
            try:
                [answer] = await self.client.complete_many([completion])
            except Exception as error:
                if not is_transient(error):
                    log.error(
                        "the API refused the completion of %s: %s",
                        lease.run_id,
                        error,
                        extra={"action": "complete-refused", "run_id": lease.run_id},
                    )
                    return
                self.metrics.api_errors.labels("tickwork").inc()
                await asyncio.sleep(backoff.next_delay())
                continue
            if isinstance(answer, Problem):
                if answer.transient:
                    await asyncio.sleep(backoff.next_delay())
                    continue
                log.warning(
                    "run %s: completion dropped (%s)",
                    lease.run_id,
                    answer.detail,
                    extra={"action": "completion-dropped", "run_id": lease.run_id},
                )
                self.test_signals.completed.signal((lease.run_id, "dropped"))
                return
            self.metrics.jobs.labels(answer.state).inc()
            log.info(
                "run %s attempt %d: %s%s",
                lease.run_id,
                lease.attempt,
                answer.state,
                f" ({message})" if message else "",
                extra={"action": "completed", "run_id": lease.run_id, "state": answer.state},
            )
            self.test_signals.completed.signal((lease.run_id, answer.state))
            return

    def _event(self, lease: Lease, reason: str, message: str, *, warning: bool = False) -> None:
        """Post an Event on the ScheduledJob, in the background (Events are best effort)."""
        scheduled_job = self.scheduled_jobs.get(lease.tenant, lease.job)
        if scheduled_job is None:
            return
        meta = scheduled_job.get("metadata") or {}
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{lease.job}.", "namespace": lease.tenant},
            "involvedObject": {
                "apiVersion": manifest.SCHEDULED_JOB_API,
                "kind": manifest.SCHEDULED_JOB_KIND,
                "namespace": lease.tenant,
                "name": lease.job,
                "uid": str(meta.get("uid") or ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.identity[:128],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }

        async def post() -> None:
            try:
                await self.kube.call(
                    "create an Event", "POST", events_path(lease.tenant), body=body
                )
            except KubeError as error:
                log.warning("Event %s not posted: %s", reason, error, extra={"action": "event"})

        task = asyncio.create_task(post())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # Kubernetes

    async def _scheduled_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.scheduled_jobs.get(namespace, name)
        if found is not None:
            return found
        # Created since the cache was filled, maybe: ask.
        try:
            found = await self.kube.call(
                f"read ScheduledJob {namespace}/{name}", "GET", scheduled_jobs_path(namespace, name)
            )
        except KubeError as error:
            if error.status == 404:
                return None
            raise
        self.scheduled_jobs.observe(found)
        return found

    async def _read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.kube.call(f"read Job {name}", "GET", jobs_path(namespace, name))
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    async def _delete(self, job: dict[str, Any], why: str) -> None:
        meta = job.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
            # This Job, not one made since under the same name.
            "preconditions": {"uid": meta.get("uid")},
        }
        try:
            await self.kube.call(
                f"delete Job {name}", "DELETE", jobs_path(namespace, name), body=options
            )
        except KubeError as error:
            if error.status not in (404, 409):
                raise
        else:
            self.metrics.jobs.labels("deleted").inc()
            log.info("Job %s deleted: %s", name, why, extra={"action": "job-deleted", "job": name})
        self.jobs.forget(namespace, name)

    async def _pods(self, lease: Lease) -> list[dict[str, Any]]:
        selector = (
            f"{containers.LABEL_RUN}={lease.run_id},{containers.LABEL_ATTEMPT}={lease.attempt}"
        )
        try:
            listed = await self.kube.call(
                "list the Job's pods",
                "GET",
                pods_path(lease.tenant),
                query={"labelSelector": selector},
            )
        except KubeError as error:
            log.warning("no termination message: %s", error, extra={"action": "pods"})
            return []
        return list(listed.get("items") or [])

    # Helpers

    async def _step(self, step: str, held: Held) -> None:
        if self.checkpoint is not None:
            await self.checkpoint(step, held.name)

    def _beat_retry(self, held: Held) -> float:
        """The wait before a failed heartbeat is sent again: a full-jitter backoff, never
        longer than the interval, so a short outage does not cost the lease."""
        held.failures += 1
        settings = self.settings
        ceiling = backoff_ceiling(
            held.failures, settings.retry_base_seconds, settings.retry_max_seconds
        )
        return self.rng.uniform(0.0, min(ceiling, self.interval))


async def _first(work: Awaitable[Any], stop: asyncio.Event) -> Any:
    """``work``'s result, or None when ``stop`` is set first (``work`` is cancelled)."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None
