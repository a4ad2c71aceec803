"""Run-derived status from the database, in batches: what runs do shows on the object
within the status interval, with the RunDead and MissedRunsCaughtUp Events."""

from __future__ import annotations

import asyncio

from kube import emulator

from tickwork.core.clock import FrozenClock
from tickwork.core.records import Outcome
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.engine.jobs import Jobs
from tickwork.engine.scheduler import Scheduler

from .conftest import (
    OperatorFactory,
    created,
    edited,
    events_with,
    example,
    fail_for_good,
    observed,
    scheduled_job,
    status_of,
)


async def test_a_dead_run_shows_in_status_and_as_an_event_within_the_interval(
    cluster_kube: emulator.Emulator,
    operator_for: OperatorFactory,
    jobs: Jobs,
    dispatcher: Dispatcher,
) -> None:
    loop = asyncio.get_running_loop()
    async with operator_for(status_interval=0.5):
        await created(cluster_kube, example("poison-pill"))
        await fail_for_good(jobs, dispatcher, "poison-pill")
        died = loop.time()
        obj = await cluster_kube.wait_for(
            "sj",
            "poison-pill",
            lambda o: ((o or {}).get("status") or {}).get("deadRuns") == 1,
            namespace="default",
        )
        await cluster_kube.wait_until(
            lambda: bool(events_with(cluster_kube, "poison-pill", "RunDead"))
        )
        assert loop.time() - died < 1.0 + 0.5  # one interval, and the pass itself
    assert obj is not None
    status = obj["status"]
    assert (status["lastRunState"], status["activeRuns"], status["deadRuns"]) == ("dead", 0, 1)
    assert status["lastScheduleTime"] == "2026-03-15T01:00:00Z"  # the enqueued run's dueAt
    assert "lastSuccessfulTime" not in status
    (dead_event,) = events_with(cluster_kube, "poison-pill", "RunDead")
    assert dead_event[0] == "Warning"
    assert dead_event[2].startswith("1 run reached the dead-letter queue (1 dead in all)")


async def test_a_dead_run_storm_is_one_event_a_minute_counting_the_runs(
    cluster_kube: emulator.Emulator,
    operator_for: OperatorFactory,
    jobs: Jobs,
    dispatcher: Dispatcher,
) -> None:
    minute = [0.0]
    async with operator_for() as operator:
        operator.status_pass.notices.clock = lambda: minute[0]
        await created(cluster_kube, example("poison-pill"))

        await fail_for_good(jobs, dispatcher, "poison-pill")
        await operator.status_pass.pass_once()
        for _ in range(3):  # a storm: 15 more dead runs within the minute
            minute[0] += 10
            await fail_for_good(jobs, dispatcher, "poison-pill", runs=5)
            await operator.status_pass.pass_once()
        assert status_of(cluster_kube, "poison-pill")["deadRuns"] == 16  # status keeps up
        minute[0] = 61
        await operator.status_pass.pass_once()  # the held-back count, once the minute is up
        await cluster_kube.wait_until(
            lambda: len(events_with(cluster_kube, "poison-pill", "RunDead")) == 2
        )
    messages = [e[2] for e in events_with(cluster_kube, "poison-pill", "RunDead")]
    assert messages[0].startswith("1 run reached the dead-letter queue")
    assert messages[1].startswith("15 runs reached the dead-letter queue (16 dead in all)")


async def test_success_schedule_and_next_run_follow_the_scheduler(
    cluster_kube: emulator.Emulator,
    operator_for: OperatorFactory,
    dispatcher: Dispatcher,
    scheduler: Scheduler,
    clock: FrozenClock,
) -> None:
    async with operator_for() as operator:
        await cluster_kube.create(example("hello"))  # every minute, no jitter
        await cluster_kube.wait_for("sj", "hello", observed(1), namespace="default")
        assert status_of(cluster_kube, "hello")["nextRunTime"] == "2026-03-15T01:01:00Z"

        clock.advance(60)  # 01:01: the run of 01:01 is ready, the next is 01:02
        await scheduler.pass_once()
        await operator.status_pass.pass_once()
        status = status_of(cluster_kube, "hello")
        assert (status["lastScheduleTime"], status["lastRunState"]) == (
            "2026-03-15T01:01:00Z",
            "ready",
        )
        assert status["nextRunTime"] == "2026-03-15T01:02:00Z"

        (lease,) = await dispatcher.lease(
            ["default"], limit=1, worker_id="worker-1", lease_seconds=30
        )
        await operator.status_pass.pass_once()
        assert (
            status_of(cluster_kube, "hello")["activeRuns"],
            status_of(cluster_kube, "hello")["lastRunState"],
        ) == (1, "leased")
        clock.advance(5)
        await dispatcher.complete(
            [CompleteItem(lease.run_id, lease.fencing_token, Outcome.succeeded)]
        )
        writes = cluster_kube.count("patch", "scheduledjobs/status")
        await operator.status_pass.pass_once()
        assert cluster_kube.count("patch", "scheduledjobs/status") == writes + 1  # one patch
        status = status_of(cluster_kube, "hello")
        assert (status["lastRunState"], status["activeRuns"]) == ("succeeded", 0)
        assert status["lastSuccessfulTime"] == "2026-03-15T01:01:05Z"
        await operator.status_pass.pass_once()  # nothing changed since: nothing written
        assert cluster_kube.count("patch", "scheduledjobs/status") == writes + 1


async def test_a_catch_up_after_a_pause_is_an_event(
    cluster_kube: emulator.Emulator,
    operator_for: OperatorFactory,
    scheduler: Scheduler,
    clock: FrozenClock,
) -> None:
    job = scheduled_job(
        "hourly",
        schedule={"cron": "0 * * * *", "jitterSeconds": 0, "missedRunPolicy": "run_all"},
    )
    async with operator_for() as operator:
        await created(cluster_kube, job)
        await operator.status_pass.pass_once()  # the operator has seen the job once
        await edited(cluster_kube, "hourly", {"paused": True}, 2)
        clock.advance(5 * 3600 + 60)  # five fire times missed while paused (02:00-06:00)
        await edited(cluster_kube, "hourly", {"paused": False}, 3)
        await scheduler.pass_once()
        await operator.status_pass.pass_once()
        await cluster_kube.wait_until(
            lambda: bool(events_with(cluster_kube, "hourly", "MissedRunsCaughtUp"))
        )
    (caught,) = events_with(cluster_kube, "hourly", "MissedRunsCaughtUp")
    assert caught[:2] == ("Normal", "MissedRunsCaughtUp")
    assert caught[2] == "5 missed fire time(s) caught up"
    assert status_of(cluster_kube, "hourly")["missedRunsDropped"] == 0
