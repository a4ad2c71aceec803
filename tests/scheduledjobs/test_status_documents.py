"""What the operator writes into status, as pure functions: the Ready condition's
transition time, the smallest merge patch, the RunDead rate limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwork.core.records import JobStatus, State
from tickwork.operator import admission, status
from tickwork.operator.events import DeadRunNotices

T0 = datetime(2026, 3, 15, 1, 0, tzinfo=UTC)


def job(**changes: object) -> JobStatus:
    fields: dict[str, object] = {
        "tenant": "team-a",
        "name": "report",
        "shard": 2,
        "generation": 1,
        "paused": False,
        "managed_by": None,
        "next_run_time": T0 + timedelta(hours=1),
        "last_schedule_time": None,
        "last_run_state": None,
        "last_successful_time": None,
        "active_runs": 0,
        "dead_runs": 0,
        "missed_runs_dropped": 0,
        "missed_caught_up": 0,
    }
    fields.update(changes)
    return JobStatus(**fields)  # type: ignore[arg-type]


def test_the_ready_condition_moves_its_transition_time_only_when_it_flips() -> None:
    first = status.stored({}, job(), 1, T0)
    (ready,) = first["conditions"]
    assert ready["lastTransitionTime"] == "2026-03-15T01:00:00Z"
    later = T0 + timedelta(minutes=5)
    paused = status.stored(first, job(paused=True, next_run_time=None), 2, later)
    assert paused["conditions"][0]["reason"] == "Paused"
    assert paused["conditions"][0]["lastTransitionTime"] == "2026-03-15T01:00:00Z"
    assert paused["nextRunTime"] is None  # removed by the merge patch
    broken = status.with_ready(paused, status.Reason.invalid_spec, "spec.x: no", 3, later)
    assert broken["conditions"][0]["status"] == "False"
    assert broken["conditions"][0]["lastTransitionTime"] == "2026-03-15T01:05:00Z"
    assert set(broken) == {"conditions"}  # what the store holds is left as it is


def test_the_patch_holds_only_what_changed_and_nothing_when_nothing_did() -> None:
    held = status.stored({}, job(), 1, T0)
    assert status.changes(held, status.stored(held, job(), 1, T0 + timedelta(hours=2))) == {}
    moved = status.run_fields(
        job(dead_runs=1, last_run_state=State.dead, last_schedule_time=T0, next_run_time=None)
    )
    assert status.changes(held, moved) == {
        "deadRuns": 1,
        "lastRunState": "dead",
        "lastScheduleTime": "2026-03-15T01:00:00Z",
        "nextRunTime": None,
    }


def test_one_run_dead_event_per_job_per_minute_counting_the_runs_in_between() -> None:
    now = [0.0]
    notices = DeadRunNotices(window=60, clock=lambda: now[0])
    key = ("team-a", "report")
    assert notices.add(key, 1) == 1  # the first death is told at once
    now[0] = 10
    assert notices.add(key, 3) is None  # a storm: held back
    now[0] = 30
    assert notices.add(key, 2) is None
    assert notices.due() == []
    assert notices.add(("team-a", "other"), 1) == 1  # other jobs are not held back
    now[0] = 61
    assert notices.due() == [(key, 5)]  # one Event for the five
    assert notices.due() == []
    now[0] = 200
    assert notices.due() == []
    assert notices.add(key, 1) == 1


def test_admission_allows_every_update_that_leaves_spec_alone_or_deletes() -> None:
    def refuse(document: object, source: str) -> object:
        raise AssertionError("an unchanged or deleting update is not parsed")

    bad = {"metadata": {"name": "x", "namespace": "a"}, "spec": {"schedule": {"cron": "x"}}}
    labelled = {**bad, "metadata": {**bad["metadata"], "labels": {"a": "b"}}}
    assert admission.refusal("UPDATE", labelled, bad, refuse) is None
    deleting = {**bad, "metadata": {**bad["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert admission.refusal("UPDATE", {**deleting, "spec": {}}, bad, refuse) is None
    assert admission.refusal("DELETE", None, bad, refuse) is None
