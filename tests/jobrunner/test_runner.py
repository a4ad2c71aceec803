"""A container job's runs as Kubernetes Jobs: one Job per attempt, with the contract's
name, labels, owner, variables and limits; the run ends as its Job does (succeeded,
failed with the Job's reason and the last container's termination message, retried with
the job's backoff, deleted); a cancelled run's Job is deleted; a dry run makes none.
And the runner killed at every step: between creating the Job and anything else,
mid-heartbeat, after the Job finished but before the run was completed. Whatever the
kill, a run has one Job per attempt, and a runner whose lease was taken from it never
touches the next attempt's Job."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest
from polling import eventually

from tickwork.cli import jobrunner as jobrunner_cli
from tickwork.core import containers
from tickwork.core.records import Run, State
from tickwork.jobrunner import manifest
from tickwork.worker.client import Lease

from .conftest import TEMPLATE, TENANT, WAIT, Cluster, FakeClock, RunnerFactory

pytestmark = pytest.mark.timeout(60)


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def events(cluster: Cluster, name: str) -> list[tuple[str, str, str]]:
    posted = sorted(
        (e for e in cluster.kube.objects("events", TENANT) if e["involvedObject"]["name"] == name),
        key=lambda e: int(e["metadata"]["resourceVersion"]),
    )
    return [(e["type"], e["reason"], e["message"]) for e in posted]


async def ended(runner: Any, run_id: str) -> str:
    _, state = await runner.test_signals.completed.wait_for(lambda c: c[0] == run_id, WAIT)
    return str(state)


async def export_run(cluster: Cluster, payload: Any = None, **spec: Any) -> tuple[str, str, str]:
    """Declare the job ``export`` and enqueue a run of it: the run's id and the names of
    its first two attempts' Jobs."""
    await cluster.declare("export", **spec)
    run_id = await cluster.enqueue("export", payload)
    first, second = (containers.job_name("export", run_id, n) for n in (1, 2))
    return run_id, first, second


async def killed(doomed: Any) -> None:
    """Wait for a runner made with ``kill_at`` to reach its kill point."""
    await asyncio.wait_for(doomed.killed.wait(), WAIT)


async def assert_ended_as(
    cluster: Cluster, run_id: str, state: State, attempt: int, jobs: list[str]
) -> Run:
    """Check the run's end and the Jobs made for it; returns the run."""
    run = await cluster.run(run_id)
    assert (run.state, run.attempt) == (state, attempt)
    assert cluster.created_jobs() == jobs
    return run


async def test_a_run_is_one_job_with_the_contracts_fields_and_succeeds_with_it(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    declared = await cluster.declare("export", timeoutSeconds=900)
    run_id = await cluster.enqueue("export", {"since": "2026-03-14"})
    name = containers.job_name("export", run_id, 1)
    async with runner_for() as runner:
        job = await cluster.controller.created(name)
        await cluster.kube.wait_until(lambda: bool(events(cluster, "export")))
        await cluster.controller.succeed(name)
        assert await ended(runner, run_id) == "succeeded"

    run = await assert_ended_as(cluster, run_id, State.succeeded, 1, jobs=[name])
    assert name == f"export-{run_id}-1" and len(name) <= 63

    meta = job["metadata"]
    assert meta["labels"] == {
        "team": "billing",
        "tickwork.dev/job": "export",
        "tickwork.dev/run": run_id,
        "tickwork.dev/attempt": "1",
        "tickwork.dev/queue": "containers",
        "app.kubernetes.io/managed-by": "tickwork-job-runner",
    }
    assert meta["annotations"]["owner"] == "billing"
    assert meta["annotations"]["tickwork.dev/fencing-token"] == str(run.fencing_token)
    [owner] = meta["ownerReferences"]
    assert owner == {
        "apiVersion": "tickwork.dev/v1alpha1",
        "kind": "ScheduledJob",
        "name": "export",
        "uid": declared["metadata"]["uid"],
        "controller": True,
    }
    spec = job["spec"]
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"]) == (0, 900)
    assert spec["ttlSecondsAfterFinished"] == 86_400
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"] == {"runAsNonRoot": True}  # the template, as written
    assert spec["template"]["metadata"]["labels"]["app"] == "export"
    assert spec["template"]["metadata"]["labels"]["tickwork.dev/run"] == run_id
    every = [*pod["initContainers"], *pod["containers"]]
    assert [c["name"] for c in every] == ["prepare", "export", "sidecar"]
    for container in every:
        variables = env_of(container)
        assert variables[containers.ENV_RUN_ID] == run_id
        assert variables[containers.ENV_ATTEMPT] == "1"
        assert variables[containers.ENV_FENCING_TOKEN] == str(run.fencing_token)
        assert variables[containers.ENV_IDEMPOTENCY_KEY] == run.effective_idempotency_key
        due = datetime.fromisoformat(variables[containers.ENV_DUE_AT].replace("Z", "+00:00"))
        assert due == run.due_at
        assert orjson.loads(variables[containers.ENV_PAYLOAD]) == {"since": "2026-03-14"}
    export = pod["containers"][0]
    assert env_of(export)["MODE"] == "full"
    assert [e["name"] for e in export["env"]].count(containers.ENV_RUN_ID) == 1
    assert export["resources"] == {"limits": {"memory": "256Mi"}}
    assert events(cluster, "export")[0][:2] == ("Normal", "JobCreated")
    assert name in events(cluster, "export")[0][2]


async def test_a_failed_job_fails_the_run_with_its_reason_and_message_then_retries(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    run_id, first, second = await export_run(cluster, retry={"maxAttempts": 2, "baseSeconds": 60})
    async with runner_for() as runner:
        await cluster.controller.created(first)
        before = datetime.now(UTC)
        await cluster.controller.fail(first, "cannot reach the ledger: connection refused")
        assert await ended(runner, run_id) == "retry_wait"
        after = datetime.now(UTC)
        run = await cluster.run(run_id)
        assert run.last_error["retryable"] is True
        message = run.last_error["message"]
        assert message.startswith(f"Job {first} failed: BackoffLimitExceeded")
        assert message.endswith("container export: cannot reach the ledger: connection refused")
        # The job's backoff, as for a handler's failure: within baseSeconds of the failure.
        assert before < run.ready_at <= after + timedelta(seconds=60)
        await cluster.kube.wait_until(
            lambda: any(e[1] == "JobFailed" for e in events(cluster, "export"))
        )

        await cluster.retry_now(run_id)
        await cluster.controller.created(second)
        await cluster.controller.exceed_deadline(second)
        assert await ended(runner, run_id) == "dead"
    run = await cluster.run(run_id)
    assert (run.state, run.attempt) == (State.dead, 2)
    assert (
        "DeadlineExceeded: Job was active longer than specified deadline"
        in (run.last_error["message"])
    )
    assert "exit code 137" in run.last_error["message"]
    assert cluster.created_jobs() == [first, second]
    failed = [e for e in events(cluster, "export") if e[1] == "JobFailed"]
    assert [e[0] for e in failed] == ["Warning", "Warning"]


async def test_a_job_deleted_by_someone_fails_its_attempt(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    run_id, name, _ = await export_run(cluster)
    async with runner_for() as runner:
        await cluster.controller.created(name)
        await cluster.controller.delete(name)
        assert await ended(runner, run_id) == "retry_wait"
    run = await cluster.run(run_id)
    assert run.last_error["message"] == f"Job {name} was deleted before it finished"


async def test_a_cancelled_run_has_its_job_deleted(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    run_id, name, _ = await export_run(cluster)
    clock = FakeClock()
    async with runner_for(clock=clock) as runner:
        await cluster.controller.created(name)
        await cluster.api.jobs.cancel(run_id, "test")
        clock.advance(10)  # a third of the lease: the next heartbeat is due
        runner.wake()
        assert await ended(runner, run_id) == "cancelled"
    assert cluster.controller.job(name) is None
    assert cluster.deleted_jobs() == [name]
    [delete] = [r for r in cluster.kube.audit if r.verb == "delete"]
    assert delete.body["propagationPolicy"] == "Background"


async def test_a_dry_run_creates_no_job(cluster: Cluster, runner_for: RunnerFactory) -> None:
    await cluster.declare("export", dryRun=True)
    run_id = await cluster.enqueue("export")
    async with runner_for() as runner:
        assert await ended(runner, run_id) == "succeeded"
    assert cluster.created_jobs() == []


async def test_a_large_payload_is_a_file(cluster: Cluster, runner_for: RunnerFactory) -> None:
    payload = {"rows": ["x" * 100] * 400}  # 40 KiB encoded
    _, name, _ = await export_run(cluster, payload)
    async with runner_for():
        job = await cluster.controller.created(name)
    template = job["spec"]["template"]
    stored = template["metadata"]["annotations"][containers.ANNOTATION_PAYLOAD]
    assert orjson.loads(stored) == payload
    [volume] = [v for v in template["spec"]["volumes"] if v["name"] == containers.PAYLOAD_VOLUME]
    [item] = volume["downwardAPI"]["items"]
    assert item["path"] == "payload.json"
    for container in template["spec"]["containers"]:
        variables = env_of(container)
        assert containers.ENV_PAYLOAD not in variables
        assert variables[containers.ENV_PAYLOAD_FILE] == "/var/run/tickwork/payload.json"
        assert {
            "name": containers.PAYLOAD_VOLUME,
            "mountPath": "/var/run/tickwork",
            "readOnly": True,
        } in container["volumeMounts"]


async def test_killed_before_creating_the_job(cluster: Cluster, runner_for: RunnerFactory) -> None:
    """No Job was made: nothing to take up. The lease runs out, the retry makes the one
    Job of the run."""
    run_id, first, second = await export_run(cluster, retry={"maxAttempts": 3, "baseSeconds": 0})
    async with runner_for(kill_at="creating") as doomed:
        await killed(doomed)
    async with runner_for() as runner:
        assert runner.test_signals.adopted.drain() == []
        await cluster.expire(run_id)
        await cluster.retry_now(run_id)
        await cluster.controller.created(second)
        await cluster.controller.succeed(second)
        assert await ended(runner, run_id) == "succeeded"
    await assert_ended_as(cluster, run_id, State.succeeded, 2, jobs=[second])
    assert cluster.controller.job(first) is None


async def test_killed_between_creating_the_job_and_anything_else(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    """The next runner finds the Job, holds its lease on and follows it: one Job."""
    run_id, name, _ = await export_run(cluster)
    async with runner_for(kill_at="created") as doomed:
        await killed(doomed)
    async with runner_for() as runner:
        assert await runner.test_signals.adopted.wait(WAIT) == name
        await cluster.controller.succeed(name)
        assert await ended(runner, run_id) == "succeeded"
    await assert_ended_as(cluster, run_id, State.succeeded, 1, jobs=[name])


async def test_a_job_made_for_the_attempt_already_is_followed_not_doubled(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    """The attempt's Job exists when the runner creates it (a create whose answer was
    lost, an attempt leased again): the runner finds it by its name and follows it."""
    declared = await cluster.declare("export")
    run_id = await cluster.enqueue("export")
    name = containers.job_name("export", run_id, 1)

    async def made_before(step: str, job: str) -> None:
        if step != "creating":
            return
        run = await cluster.run(run_id)
        lease = Lease(
            run_id=run_id,
            job="export",
            tenant=TENANT,
            queue=containers.QUEUE,
            priority="default",
            attempt=1,
            idempotency_key="",
            fencing_token=run.fencing_token or 0,
            due_at=None,
            lease_expires_at=None,
            deadline=None,
            payload=None,
        )
        await cluster.kube.create(manifest.build(lease, declared, TEMPLATE, 60, 60))

    async with runner_for(checkpoint=made_before) as runner:
        await cluster.controller.created(name)
        await cluster.controller.succeed(name)
        assert await ended(runner, run_id) == "succeeded"
    [refused] = [r for r in cluster.kube.audit if (r.verb, r.target) == ("create", "jobs")]
    assert refused.code == 409
    assert [j["metadata"]["name"] for j in cluster.kube.objects("jobs", TENANT)] == [name]


async def test_killed_mid_heartbeat_and_gone_past_the_lease(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    """The lease ran out meanwhile: the next runner fences the orphaned Job off (deletes
    it), the retry gets a Job of its own."""
    run_id, first, second = await export_run(cluster, retry={"maxAttempts": 3, "baseSeconds": 0})
    clock = FakeClock()
    async with runner_for(clock=clock, kill_at="heartbeat") as doomed:
        await cluster.controller.created(first)
        clock.advance(10)
        doomed.wake()
        await killed(doomed)
    await cluster.expire(run_id)
    async with runner_for() as runner:
        assert await runner.test_signals.fenced.wait(WAIT) == first
        assert cluster.controller.job(first) is None
        await cluster.retry_now(run_id)
        await cluster.controller.created(second)
        await cluster.controller.succeed(second)
        assert await ended(runner, run_id) == "succeeded"
    await assert_ended_as(cluster, run_id, State.succeeded, 2, jobs=[first, second])
    assert cluster.deleted_jobs() == [first]


async def test_killed_after_the_job_finished_before_the_run_was_completed(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    run_id, name, _ = await export_run(cluster)
    async with runner_for(kill_at="finished") as doomed:
        await cluster.controller.created(name)
        await cluster.controller.succeed(name)
        await killed(doomed)
    assert (await cluster.run(run_id)).state is State.leased
    async with runner_for() as runner:
        assert await ended(runner, run_id) == "succeeded"
    assert (await cluster.run(run_id)).attempt == 1
    assert cluster.created_jobs() == [name]
    assert cluster.deleted_jobs() == []  # a finished Job stays for its logs


async def test_a_lost_lease_stops_the_job_and_leaves_the_run_alone(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    """The runner was cut off past its lease: the reaper took the run back. Its next
    heartbeat is refused, so it deletes its Job and completes nothing."""
    run_id, name, _ = await export_run(cluster, retry={"maxAttempts": 3, "baseSeconds": 60})
    clock = FakeClock()
    async with runner_for(clock=clock) as runner:
        await cluster.controller.created(name)
        await cluster.expire(run_id)
        clock.advance(10)
        runner.wake()
        assert await runner.test_signals.fenced.wait(WAIT) == name
        assert cluster.controller.job(name) is None
        assert runner.test_signals.completed.drain() == []
    run = await cluster.run(run_id)
    assert (run.state, run.attempt) == (State.retry_wait, 1)
    assert run.last_error["reason"] == "lease-expired"
    assert cluster.deleted_jobs() == [name]


async def test_a_runner_whose_lease_was_reaped_never_touches_the_next_attempts_job(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    """Runner A lost its lease to the reaper; runner B, leasing the retry, stops A's Job
    (its lease is older) and runs its own. A, seeing its Job go, reports the attempt
    with its old fencing token: refused, it changes nothing; B's Job runs on."""
    run_id, first, second = await export_run(cluster, retry={"maxAttempts": 3, "baseSeconds": 0})
    async with runner_for(max_jobs=1) as cut_off:
        await cluster.controller.created(first)
        await cluster.expire(run_id)
        await cluster.retry_now(run_id)
        async with runner_for(identity="runner-b") as runner:
            assert await runner.test_signals.fenced.wait(WAIT) == first  # B stopped A's Job
            await cluster.controller.created(second)
            assert await cut_off.test_signals.completed.wait(WAIT) == (run_id, "dropped")
            assert cluster.controller.job(second) is not None
            await cluster.controller.succeed(second)
            # Whichever leased the retry (A may, once its slot is free) completes it.
            done, waiting = await asyncio.wait(
                [asyncio.ensure_future(ended(r, run_id)) for r in (runner, cut_off)],
                return_when=asyncio.FIRST_COMPLETED,
            )
            for task in waiting:
                task.cancel()
            assert [d.result() for d in done] == ["succeeded"]
    assert cluster.deleted_jobs() == [first]
    await assert_ended_as(cluster, run_id, State.succeeded, 2, jobs=[first, second])


async def test_a_run_without_its_scheduled_job_goes_dead_at_once(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    await cluster.declare("export")
    run_id = await cluster.enqueue("export")
    await cluster.kube.delete("sj", "export", namespace=TENANT)
    async with runner_for() as runner:
        assert await ended(runner, run_id) == "dead"
    run = await cluster.run(run_id)
    assert run.last_error["retryable"] is False
    assert run.last_error["message"] == (
        f"no ScheduledJob {TENANT}/export: container jobs are declared as ScheduledJobs"
    )
    assert cluster.created_jobs() == []


async def test_a_job_kubernetes_refuses_fails_the_run_for_good(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    long = "e" * 60  # the Job's name would pass 63 characters: shortened, still taken
    await cluster.declare(long)
    run_id = await cluster.enqueue(long)
    name = containers.job_name(long, run_id, 1)
    assert len(name) == 63
    cluster.kube.fail("create", "jobs", code=422, message="spec.template.spec: quota")
    async with runner_for() as runner:
        assert await ended(runner, run_id) == "dead"
        run = await cluster.run(run_id)
        assert run.last_error["retryable"] is False
        assert "Kubernetes refused the Job" in run.last_error["message"]
        # A second run goes through (the name is valid).
        again = await cluster.enqueue(long)
        await cluster.controller.created(containers.job_name(long, again, 1))


async def test_the_health_port_answers_with_the_runners_state(
    cluster: Cluster, runner_for: RunnerFactory
) -> None:
    async with runner_for() as runner:
        server = jobrunner_cli.health_server(runner, "127.0.0.1", 0)
        await server.start()
        try:
            async with httpx.AsyncClient(base_url=server.url) as http:
                await eventually(lambda: runner.leasing, within=WAIT, what="a lease call")
                ready = await http.get("/readyz")
                alive = await http.get("/healthz")
                scraped = await http.get("/metrics")
        finally:
            await server.stop()
    assert alive.status_code == 200
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "jobsSynced": True,
        "scheduledJobsSynced": True,
        "leasing": True,
        "held": 0,
    }
    assert "tickwork_job_runner_ready" in scraped.text
