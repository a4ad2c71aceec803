"""The operator reconciling ScheduledJobs as a user sees it: status and Events on the
object, the definition in its shard, runs materialised or not."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest
from kube import emulator

from tickwork.core.clock import FrozenClock
from tickwork.core.errors import NotFound
from tickwork.core.records import Manager, State
from tickwork.core.spec import JobSpec
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.scheduler import Scheduler

from .conftest import (
    OperatorFactory,
    condition,
    created,
    edited,
    events_of,
    example,
    observed,
    ready,
    scheduled_job,
)

# What each example's nextRunTime is with the test clock at 2026-03-15T01:00:00Z.
NEXT_RUN = {
    "hello": "2026-03-15T01:01:00Z",  # every minute
    "nightly-report": "2026-03-15T01:30:00Z",  # 02:30 in Berlin (CET)
    "flaky-export": "2026-03-15T01:02:00Z",  # every 2 minutes
    "poison-pill": "2026-03-15T01:05:00Z",  # every 5 minutes
}


def resource_version(kube: emulator.Emulator, name: str, namespace: str = "default") -> str:
    obj = kube.get("sj", name, namespace)
    assert obj is not None
    return str(obj["metadata"]["resourceVersion"])


async def test_each_example_is_stored_in_its_shard_and_ready_within_two_seconds(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory, jobs: Jobs
) -> None:
    loop = asyncio.get_running_loop()
    async with operator_for():
        for name, next_run in NEXT_RUN.items():
            manifest = example(name)
            started = loop.time()
            obj = await created(cluster_kube, manifest)
            assert loop.time() - started < 2
            assert obj is not None
            status = obj["status"]
            definition = (await jobs.get("default", name)).definition
            assert status["shard"] == definition.shard == jobs.shard_of("default", name)
            assert status["nextRunTime"] == next_run
            assert condition(obj) == {
                "type": "Ready",
                "status": "True",
                "reason": "Scheduled",
                "message": f"stored in shard {definition.shard}",
                "lastTransitionTime": condition(obj)["lastTransitionTime"],  # type: ignore[index]
                "observedGeneration": 1,
            }
            assert (status["activeRuns"], status["deadRuns"], status["missedRunsDropped"]) == (
                0,
                0,
                0,
            )
            assert definition.managed_by is Manager.kubernetes
            assert definition.spec == JobSpec.model_validate(manifest["spec"])
            await cluster_kube.wait_until(
                lambda name=name: bool(events_of(cluster_kube, "default", name))  # type: ignore[misc]
            )
            assert events_of(cluster_kube, "default", name) == [
                (
                    "Normal",
                    "Scheduled",
                    f"definition created in shard {definition.shard} (generation 1)",
                )
            ]
            # Kopf's bookkeeping is in status; the object's metadata carries only the
            # finalizer, so GitOps tools see no drift.
            assert "annotations" not in obj["metadata"]
            assert obj["metadata"]["finalizers"] == ["tickwork.dev/finalizer"]
            assert "last-handled-configuration" in status["kopf"]


async def test_editing_the_cron_updates_next_run_time_and_the_stored_definition(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory, jobs: Jobs
) -> None:
    async with operator_for():
        await created(cluster_kube, example("nightly-report"))
        obj = await edited(cluster_kube, "nightly-report", {"schedule": {"cron": "15 4 * * *"}}, 2)
        assert obj is not None
        assert obj["status"]["nextRunTime"] == "2026-03-15T03:15:00Z"  # 04:15 CET
        definition = (await jobs.get("default", "nightly-report")).definition
        assert definition.spec.schedule is not None
        assert definition.spec.schedule.cron == "15 4 * * *"
        assert definition.generation == 2
        await cluster_kube.wait_until(
            lambda: len(events_of(cluster_kube, "default", "nightly-report")) == 2
        )
        assert events_of(cluster_kube, "default", "nightly-report")[-1][2] == (
            f"definition updated in shard {definition.shard} (generation 2)"
        )


async def test_a_restart_with_nothing_changed_writes_nothing(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory, jobs: Jobs
) -> None:
    async with operator_for():
        for name in NEXT_RUN:
            await cluster_kube.create(example(name))
        for name in NEXT_RUN:
            await cluster_kube.wait_for("sj", name, observed(1), namespace="default")
    generations = {n: (await jobs.get("default", n)).definition.generation for n in NEXT_RUN}
    writes = cluster_kube.count("patch", "scheduledjobs/status")
    events = len(cluster_kube.objects("events", "default"))
    versions = {n: resource_version(cluster_kube, n) for n in NEXT_RUN}

    async with operator_for() as operator:
        # Every object is reconciled again at start (Kopf's resume handlers)...
        resumed = {await operator.test_signals.reconciled.wait() for _ in NEXT_RUN}
        assert resumed == {("default", n) for n in NEXT_RUN}
        await operator.status_pass.pass_once()
        # ...and, being as stored, costs no write, no Event and no generation.
        assert {n: resource_version(cluster_kube, n) for n in NEXT_RUN} == versions
        assert {n: (await jobs.get("default", n)).definition.generation for n in NEXT_RUN} == (
            generations
        )
        # Kopf handles an object's events one after the other: once an edit made now is
        # Ready, whatever the resume of the same object would have written is written.
        for name in NEXT_RUN:
            await cluster_kube.patch(
                "sj", name, {"spec": {"timeoutSeconds": 1799}}, namespace="default"
            )
        for name in NEXT_RUN:
            await cluster_kube.wait_for("sj", name, observed(2), namespace="default")
    # One status patch and one Event per edit: none from the restart.
    assert cluster_kube.count("patch", "scheduledjobs/status") == writes + len(NEXT_RUN)
    assert len(cluster_kube.objects("events", "default")) == events + len(NEXT_RUN)


async def test_pausing_stops_new_runs_and_resuming_brings_them_back(
    cluster_kube: emulator.Emulator,
    operator_for: OperatorFactory,
    jobs: Jobs,
    scheduler: Scheduler,
    clock: FrozenClock,
) -> None:
    async with operator_for():
        await created(cluster_kube, example("hello"))
        obj = await edited(cluster_kube, "hello", {"paused": True}, 2)
        assert condition(obj)["reason"] == "Paused"  # type: ignore[index]
        assert ready(obj)  # pausing is not a fault: alerts key on Ready=False
        assert "nextRunTime" not in obj["status"]  # type: ignore[index]
        assert (await jobs.get("default", "hello")).definition.paused

        clock.advance(300)
        await scheduler.pass_once()
        runs, _ = await jobs.runs_of_job("default", "hello", None, None, 10)
        assert runs == []  # five minutes paused: not one run

        obj = await edited(cluster_kube, "hello", {"paused": False}, 3)
        assert condition(obj)["reason"] == "Scheduled"  # type: ignore[index]
        await scheduler.pass_once()
        runs, _ = await jobs.runs_of_job("default", "hello", None, None, 10)
        assert runs  # the missed-run policy (run_once) catches up, then it runs on


async def test_deleting_removes_the_definition_cancels_pending_runs_and_keeps_history(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory, jobs: Jobs
) -> None:
    async with operator_for():
        await created(cluster_kube, example("poison-pill"))
        pending, _ = await jobs.enqueue("default", "poison-pill", EnqueueRequest(), "test")
        later, _ = await jobs.enqueue(
            "default", "poison-pill", EnqueueRequest(delay_seconds=3600), "test"
        )
        await cluster_kube.delete("sj", "poison-pill", namespace="default")
        # The finalizer holds the object until the store has deleted the definition.
        await cluster_kube.wait_for("sj", "poison-pill", lambda o: o is None, namespace="default")
    with pytest.raises(NotFound):
        await jobs.get("default", "poison-pill")
    for run_id in (pending.run_id, later.run_id):
        run, _ = await jobs.run(run_id)  # history stays queryable
        assert run.state is State.cancelled


async def test_a_restart_removes_the_definition_of_an_object_deleted_meanwhile(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory, jobs: Jobs
) -> None:
    async with operator_for():
        await cluster_kube.create(example("hello"))
        await cluster_kube.create(example("nightly-report"))
        for name in ("hello", "nightly-report"):
            await cluster_kube.wait_for("sj", name, observed(1), namespace="default")
    # While no operator runs, someone removes the finalizer by hand and deletes it.
    await cluster_kube.patch("sj", "hello", {"metadata": {"finalizers": None}}, namespace="default")
    await cluster_kube.delete("sj", "hello", namespace="default")
    assert cluster_kube.get("sj", "hello", "default") is None
    # An API-made job of the same kind of name is not the operator's to remove.
    await jobs.put("team-b", "hello", JobSpec(), "api")

    async with operator_for() as operator:
        await asyncio.wait_for(operator.resynced.wait(), 5)
    with pytest.raises(NotFound):
        await jobs.get("default", "hello")
    assert (await jobs.get("default", "nightly-report")).definition.managed_by is (
        Manager.kubernetes
    )
    assert (await jobs.get("team-b", "hello")).definition.managed_by is None


async def test_objects_outside_the_served_namespaces_are_left_alone(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory, jobs: Jobs
) -> None:
    async with operator_for(namespaces=("team-a",)):
        await cluster_kube.create(example("hello", namespace="team-b"))
        await created(cluster_kube, example("hello", namespace="team-a"))
    assert cluster_kube.get("sj", "hello", "team-b")["metadata"].get("finalizers") is None  # type: ignore[index]
    with pytest.raises(NotFound):
        await jobs.get("team-b", "hello")


async def test_an_object_that_takes_over_an_api_job_makes_it_kubernetes_owned(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory, jobs: Jobs
) -> None:
    await jobs.put("team-a", "report", JobSpec(queue="old"), "api")
    async with operator_for():
        await created(cluster_kube, scheduled_job("report", "team-a", queue="reports"))
    definition = (await jobs.get("team-a", "report")).definition
    assert (definition.managed_by, definition.spec.queue) == (Manager.kubernetes, "reports")


async def test_a_job_without_schedule_or_run_at_has_no_next_run_time(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory
) -> None:
    async with operator_for():
        obj = await created(cluster_kube, scheduled_job("on-demand", queue="default"))
        assert obj is not None and "nextRunTime" not in obj["status"]
        at = "2026-04-01T12:00:00Z"
        obj = await created(cluster_kube, scheduled_job("once", runAt=at))
        assert obj is not None and obj["status"]["nextRunTime"] == at


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
