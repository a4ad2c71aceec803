"""The job-runner against the emulated Kubernetes API (with the ScheduledJob CRD and a
small Job controller of the test's own) and the real API on a real PostgreSQL.

A ScheduledJob is declared twice, as the operator would leave it: the object in the
emulator (what the runner reads) and the definition in the store (what runs are made
from). ``runner_for(...)`` starts a ``JobRunner``; ``killed_at(step)`` makes its
attempts hang at one step (created, heartbeat, finished) so the test can kill it there.
Time is a fake monotonic clock the test moves (then ``runner.wake()``); leases run out
through the reaper at an instant the test names, never by waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import ADMIN_TOKEN, ApiServer, served
from kube import emulator
from kube.jobs import JobController
from kube.reviews import User
from polling import eventually

from tickwork.api.auth import Role, StaticTokens, TokenEntry
from tickwork.api.services import Services
from tickwork.core import containers
from tickwork.core.clock import FrozenClock
from tickwork.core.records import Run
from tickwork.core.settings import ApiSettings
from tickwork.core.spec import JobSpec, parse
from tickwork.engine.installation import Installation
from tickwork.engine.jobs import EnqueueRequest
from tickwork.engine.metrics import Metrics
from tickwork.engine.scheduler import Scheduler
from tickwork.jobrunner.kube import Kube
from tickwork.jobrunner.runner import Checkpoint, JobRunner
from tickwork.jobrunner.settings import JobRunnerSettings
from tickwork.operator import crd
from tickwork.store import sweeps
from tickwork.store.database import Database
from tickwork.worker.client import WorkerClient

TENANT = "acme"
RUNNER_TOKEN = "runner-acme-token-0123456789"
KUBE_TOKEN = "sa-token-of-the-job-runner-0123456789"
RUNNER_USER = User.service_account(TENANT, "job-runner")
WAIT = 10.0

TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "billing"}, "annotations": {"owner": "billing"}},
    "spec": {
        "template": {
            "metadata": {"labels": {"app": "export"}},
            "spec": {
                "initContainers": [{"name": "prepare", "image": "busybox:1.36"}],
                "containers": [
                    {
                        "name": "export",
                        "image": "registry.example/export:1.4",
                        "args": ["--since", "yesterday"],
                        "env": [
                            {"name": "MODE", "value": "full"},
                            {"name": "TICKWORK_RUN_ID", "value": "overridden"},
                        ],
                        "resources": {"limits": {"memory": "256Mi"}},
                    },
                    {"name": "sidecar", "image": "registry.example/uploader:2"},
                ],
                "securityContext": {"runAsNonRoot": True},
            },
        }
    },
}


def spec_of(**fields: Any) -> dict[str, Any]:
    """A container job's spec (camelCase, as a manifest writes it)."""
    return {"queue": containers.QUEUE, "jobTemplate": TEMPLATE, **fields}


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Cluster:
    """The pieces of one test: the emulator, the API, a Job controller."""

    kube: emulator.Emulator
    api: ApiServer
    controller: JobController
    kubeconfig: Path
    runners: list[JobRunner] = field(default_factory=list)

    async def declare(self, name: str, **fields: Any) -> dict[str, Any]:
        """The ScheduledJob ``name`` (object and stored definition)."""
        document = spec_of(**fields)
        await self.api.jobs.put(TENANT, name, parse(JobSpec, document), "test")
        created = await self.kube.create(
            {
                "apiVersion": "tickwork.dev/v1alpha1",
                "kind": "ScheduledJob",
                "metadata": {"name": name, "namespace": TENANT},
                "spec": document,
            }
        )
        return created

    async def enqueue(self, name: str, payload: Any = None) -> str:
        request = EnqueueRequest(payload=payload, payload_given=payload is not None)
        run, _ = await self.api.jobs.enqueue(TENANT, name, request, "test")
        return str(run.run_id)

    async def run(self, run_id: str) -> Run:
        run, _ = await self.api.jobs.run(run_id)
        return run

    async def expire(self, run_id: str) -> None:
        """The reaper, an hour from now: the run's lease ran out."""
        shard, _ = self.api.jobs.locate_run(run_id)
        later = datetime.now(UTC) + timedelta(hours=1)

        async def reaped() -> bool:
            async with self.api.database.connection(shard) as conn:
                return bool((await sweeps.reap(conn, now=later)).total)

        await eventually(reaped, within=WAIT, every=0.01, what="the run reaped")

    async def retry_now(self, run_id: str) -> None:
        """The due flip at the run's retry time."""
        run = await self.run(run_id)
        assert run.ready_at is not None
        await Scheduler(self.api.database, clock=FrozenClock(run.ready_at)).pass_once()

    def created_jobs(self) -> list[str]:
        """The Jobs created, in order (the emulator's audit)."""
        return [
            r.body["metadata"]["name"]
            for r in self.kube.audit
            if (r.verb, r.target) == ("create", "jobs") and r.code == 201
        ]

    def deleted_jobs(self) -> list[str]:
        return [r.name for r in self.kube.audit if (r.verb, r.target) == ("delete", "jobs")]


@pytest.fixture
async def cluster(
    kube: emulator.Emulator, database: Database, tmp_path: Path
) -> AsyncIterator[Cluster]:
    await kube.create(crd.definition())
    await kube.create_namespace(TENANT)
    kube.tokens[KUBE_TOKEN] = RUNNER_USER
    kubeconfig = kube.write_kubeconfig(tmp_path / "runner-kubeconfig", token=KUBE_TOKEN)
    tokens = StaticTokens(
        [
            TokenEntry(token=ADMIN_TOKEN, tenant="ops", role=Role.admin),
            TokenEntry(
                token=RUNNER_TOKEN,
                tenant=TENANT,
                role=Role.worker,
                queues=[containers.QUEUE],
                name="acme-job-runner",
            ),
        ]
    )
    services = Services(
        engine=Installation.over(database),
        authenticator=tokens,
        metrics=Metrics(),
        settings=ApiSettings(auth_failure_rate=0),
    )
    async with served(services) as url:
        api = ApiServer(url=url, services=services, scheduler=Scheduler(database))
        yield Cluster(kube, api, JobController(kube, TENANT), kubeconfig)


RunnerFactory = Callable[..., contextlib.AbstractAsyncContextManager[JobRunner]]


@pytest.fixture
def runner_for(cluster: Cluster) -> RunnerFactory:
    """``async with runner_for(clock=..., **settings) as runner:`` runs a job-runner for
    the block; ``runner.killed`` (when ``kill_at`` names a step) is set once an attempt
    reached that step, where it stays until the block ends: the runner is killed there."""

    @contextlib.asynccontextmanager
    async def start(
        *,
        clock: FakeClock | None = None,
        kill_at: str | None = None,
        checkpoint: Checkpoint | None = None,
        **options: Any,
    ) -> AsyncIterator[JobRunner]:
        settings = JobRunnerSettings(
            url=cluster.api.url,
            token=RUNNER_TOKEN,
            namespaces=(TENANT,),
            wait_seconds=options.pop("wait_seconds", 0.2),
            health_port=None,
            retry_base_seconds=0.01,
            retry_max_seconds=0.05,
            **options,
        )
        kube = await Kube.connect(cluster.kubeconfig)
        client = WorkerClient(settings.url, RUNNER_TOKEN)
        runner = JobRunner(client, kube, settings, clock=clock or FakeClock())
        runner.test_signals.init()
        runner.killed = asyncio.Event()  # type: ignore[attr-defined]
        runner.checkpoint = checkpoint
        if kill_at is not None:

            async def hang(step: str, _name: str) -> None:
                if step == kill_at:
                    runner.killed.set()  # type: ignore[attr-defined]
                    await asyncio.Event().wait()  # never: the process died here

            runner.checkpoint = hang
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        cluster.runners.append(runner)
        try:
            async with asyncio.timeout(WAIT):
                await runner.jobs.synced.wait()
                await runner.scheduled_jobs.synced.wait()
            yield runner
        finally:
            if kill_at is not None:
                task.cancel()  # killed: nothing runs after the step it hangs in
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                async with asyncio.timeout(WAIT):
                    await task
            await client.close()
            await kube.close()

    return start
