"""A container job's ScheduledJob shows the name of its last Job (``status.lastJobName``,
the JOB column of ``kubectl get sj``), written by the status pass from the runs: the
Job of the latest run's latest attempt, kept while a new run waits for its first."""

from __future__ import annotations

from kube import emulator, kubectl

from tickwork.core import containers
from tickwork.core.clock import FrozenClock
from tickwork.core.records import Outcome
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.scheduler import Scheduler

from .conftest import OperatorFactory, observed, scheduled_job
from .test_kubectl import table

TEMPLATE = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "x:1"}]}}}}


async def test_the_last_jobs_name_shows_in_status_and_kubectl(
    cluster_kube: emulator.Emulator,
    operator_for: OperatorFactory,
    jobs: Jobs,
    dispatcher: Dispatcher,
    scheduler: Scheduler,
    clock: FrozenClock,
) -> None:
    container_job = scheduled_job(
        "export", queue="containers", jobTemplate=TEMPLATE, retry={"baseSeconds": 0}
    )
    async with operator_for() as operator:
        await cluster_kube.create(container_job)
        await cluster_kube.create(scheduled_job("plain"))
        for name in ("export", "plain"):
            await cluster_kube.wait_for("sj", name, observed(1), namespace="default")
        run, _ = await jobs.enqueue("default", "export", EnqueueRequest(), "test")
        await jobs.enqueue("default", "plain", EnqueueRequest(), "test")
        await operator.status_pass.pass_once()
        assert "lastJobName" not in (cluster_kube.get("sj", "export", "default") or {})["status"]

        (lease,) = await dispatcher.lease(
            ["containers"], limit=1, worker_id="runner", lease_seconds=30
        )
        await dispatcher.lease(["default"], limit=1, worker_id="worker", lease_seconds=30)
        await operator.status_pass.pass_once()
        first = containers.job_name("export", run.run_id, 1)
        status = (cluster_kube.get("sj", "export", "default") or {})["status"]
        assert status["lastJobName"] == first
        rows = {row["NAME"]: row for row in table(await kubectl.run(cluster_kube, "get", "sj"))}
        assert (rows["export"]["JOB"], rows["plain"]["JOB"]) == (first, "")

        # Failed, waiting for its retry: still the Job of attempt 1; then attempt 2's.
        await dispatcher.complete(
            [CompleteItem(lease.run_id, lease.fencing_token, Outcome.failed, {"message": "x"})]
        )
        await operator.status_pass.pass_once()
        assert (cluster_kube.get("sj", "export", "default") or {})["status"]["lastJobName"] == first
        clock.advance(1)
        await scheduler.pass_once()
        await dispatcher.lease(["containers"], limit=1, worker_id="runner", lease_seconds=30)
        await operator.status_pass.pass_once()
        status = (cluster_kube.get("sj", "export", "default") or {})["status"]
        assert status["lastJobName"] == containers.job_name("export", run.run_id, 2)
