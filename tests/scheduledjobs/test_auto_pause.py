"""Auto-pause on a ScheduledJob, against the emulated API server: the job that
``pauseAfterFailures`` paused shows it (Ready=True reason Paused naming the last error,
``status.pausedReason``, one ``Warning AutoPaused`` Event) and stays paused when the
operator applies the same object again (its restart, a GitOps resync), since the pause
is not in the spec; a changed spec ends it."""

from __future__ import annotations

from typing import Any

from kube import emulator

from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.jobs import Jobs

from .conftest import (
    OperatorFactory,
    condition,
    created,
    edited,
    events_with,
    fail_for_good,
    observed,
    scheduled_job,
    status_of,
)

NAME = "flaky-export"


def auto_paused_events(kube: emulator.Emulator) -> list[tuple[str, str, str]]:
    return events_with(kube, NAME, "AutoPaused")


async def test_an_auto_paused_job_says_why_and_the_same_spec_applied_again_keeps_it(
    cluster_kube: emulator.Emulator,
    operator_for: OperatorFactory,
    jobs: Jobs,
    dispatcher: Dispatcher,
) -> None:
    job = scheduled_job(NAME, pauseAfterFailures=2, retry={"maxAttempts": 1})
    async with operator_for() as operator:
        await created(cluster_kube, job)
        await operator.status_pass.pass_once()
        await fail_for_good(jobs, dispatcher, NAME, runs=2)
        await operator.status_pass.pass_once()
        await cluster_kube.wait_until(lambda: len(auto_paused_events(cluster_kube)) == 1)
        await operator.status_pass.pass_once()  # nothing new: no second Event
    obj = cluster_kube.get("sj", NAME, "default")
    ready = condition(obj)
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("True", "Paused")
    assert "paused after 2 consecutive dead runs" in ready["message"]
    assert "poisoned" in ready["message"]  # the last error
    assert ready["observedGeneration"] == 1
    status: dict[str, Any] = status_of(cluster_kube, NAME)
    assert "poisoned" in status["pausedReason"]
    assert "nextRunTime" not in status
    [(kind, _, message)] = auto_paused_events(cluster_kube)
    assert kind == "Warning" and "poisoned" in message
    assert obj is not None and obj["spec"].get("paused") in (None, False)

    # The operator again (a restart): every object is applied again, unchanged.
    async with operator_for() as operator:
        await cluster_kube.wait_for("sj", NAME, observed(1), namespace="default")
        await operator.status_pass.pass_once()
        assert (await jobs.get("default", NAME)).definition.auto_paused
        ready = condition(cluster_kube.get("sj", NAME, "default"))
        assert ready is not None and ready["reason"] == "Paused"
        assert len(auto_paused_events(cluster_kube)) == 1

        # A change of the spec (the fix) ends the pause.
        await edited(cluster_kube, NAME, {"pauseAfterFailures": 3}, 2)
        await operator.status_pass.pass_once()
    definition = (await jobs.get("default", NAME)).definition
    assert not definition.paused and definition.consecutive_dead == 0
    ready = condition(cluster_kube.get("sj", NAME, "default"))
    assert ready is not None and ready["reason"] == "Scheduled"
    assert "pausedReason" not in status_of(cluster_kube, NAME)


async def test_a_resume_through_the_api_shows_on_the_object(
    cluster_kube: emulator.Emulator,
    operator_for: OperatorFactory,
    jobs: Jobs,
    dispatcher: Dispatcher,
) -> None:
    job = scheduled_job(NAME, pauseAfterFailures=1, retry={"maxAttempts": 1})
    async with operator_for() as operator:
        await created(cluster_kube, job)
        await fail_for_good(jobs, dispatcher, NAME)
        await operator.status_pass.pass_once()
        ready = condition(cluster_kube.get("sj", NAME, "default"))
        assert ready is not None and ready["reason"] == "Paused"
        await jobs.set_paused("default", NAME, False, "someone")
        await operator.status_pass.pass_once()
        ready = condition(cluster_kube.get("sj", NAME, "default"))
        assert ready is not None
        assert (ready["status"], ready["reason"]) == ("True", "Scheduled")
        assert "pausedReason" not in status_of(cluster_kube, NAME)
