"""Notifications about time passing: a run not succeeded by its job's deadline (read in
the job's zone, across DST changes), an attempt leased longer than the job allows. A
scheduler's pass makes each once, as a run of ``tickwork.notify`` delivered to a real
receiver; a second look, a succeeded run, or a job with nowhere to send make none."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import orjson
import pytest
from test_notifications import ENVIRON, TENANT, Receiver, _deliveries, _die, target

from tickwork.cli.webhooks import WebhookPoster
from tickwork.core.clock import FrozenClock
from tickwork.core.records import Completion, Outcome
from tickwork.core.spec import JobSpec, Notify, NotifyEvent, Retry, Schedule
from tickwork.engine import watches
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.notifications import Deliveries, Targets, slack_text
from tickwork.engine.scheduler import Scheduler
from tickwork.store import leases, sweeps
from tickwork.store.database import Database

pytest_plugins = ["test_notifications"]

BERLIN = "Europe/Berlin"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


async def look(database: Database, clock: FrozenClock, batch: int = watches.BATCH) -> int:
    made = 0
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            made += await watches.look(conn, clock.now(), batch=batch)
    return made


async def _keys(database: Database) -> set[str]:
    return {key for _, key, _ in await _deliveries(database)}


@pytest.mark.parametrize(
    ("due", "deadline", "zone", "expected"),
    [
        # Later that day, and the next day once the time has passed (or is the due time).
        ("2026-03-14T02:30:00+01:00", "06:00", BERLIN, "2026-03-14T06:00:00+01:00"),
        ("2026-03-14T07:00:00+01:00", "06:00", BERLIN, "2026-03-15T06:00:00+01:00"),
        ("2026-03-14T06:00:00+01:00", "06:00", BERLIN, "2026-03-15T06:00:00+01:00"),
        # Spring forward: 02:30 does not exist on 29 March, the instant after the gap.
        ("2026-03-29T01:30:00+01:00", "02:30", BERLIN, "2026-03-29T03:00:00+02:00"),
        # 06:00 on the short night is 04:00 UTC, not 05:00.
        ("2026-03-29T01:00:00+01:00", "06:00", BERLIN, "2026-03-29T06:00:00+02:00"),
        # Fall back: 02:30 happens twice on 25 October, the first one counts.
        ("2026-10-25T01:00:00+02:00", "02:30", BERLIN, "2026-10-25T02:30:00+02:00"),
        ("2026-03-14T23:30:00Z", "00:15", "UTC", "2026-03-15T00:15:00Z"),
    ],
)
def test_the_deadline_is_the_first_local_time_after_the_due_time(
    due: str, deadline: str, zone: str, expected: str
) -> None:
    assert watches.deadline_of(at(due), deadline, zone) == at(expected)


async def test_a_run_not_succeeded_by_the_deadline_is_told_once_across_a_dst_night(
    database: Database, clock: FrozenClock, receiver: Receiver
) -> None:
    jobs = Jobs(database, clock)
    await Targets(database, clock).put(TENANT, target(receiver))
    notify = Notify(target="ops", deadline="06:00")
    spec = JobSpec(schedule=Schedule(cron="0 1 * * *", time_zone=BERLIN), notify=notify)
    await jobs.put(TENANT, "nightly", spec, "test")
    # Due 01:00 local on the night clocks spring forward: 06:00 CEST is 04:00 UTC.
    clock.set(at("2026-03-29T01:00:00+01:00"))
    late, _ = await jobs.enqueue(TENANT, "nightly", EnqueueRequest(), "test")
    done, _ = await jobs.enqueue(TENANT, "nightly", EnqueueRequest(), "test")
    shard = jobs.shard_of(TENANT, "nightly")
    async with database.connection(shard) as conn:
        leased = await leases.claim(conn, shard, ["default"], 2, "w", 30, clock.now())
        first = next(lease for lease in leased if lease.id == done.id)
        completion = Completion(first.id, first.fencing_token, Outcome.succeeded)
        await leases.complete(conn, shard, [completion], clock.now())

    clock.set(at("2026-03-29T03:59:59Z"))
    assert await look(database, clock) == 0
    clock.set(at("2026-03-29T04:00:00Z"))
    assert await look(database, clock) == 1
    assert await look(database, clock) == 0
    [(state, key, body)] = await _deliveries(database)
    assert state == "ready" and key == f"notify/deadlineMissed/{late.run_id}"
    assert body == {
        "event": "deadlineMissed",
        "tenant": TENANT,
        "job": "nightly",
        "runId": late.run_id,
        "target": "ops",
        "at": "2026-03-29T04:00:00Z",
        "state": "leased",
        "dueAt": "2026-03-29T00:00:00Z",
        "deadline": "2026-03-29T04:00:00Z",
        "timeZone": BERLIN,
    }
    assert "deadlineMissed" in slack_text(body | {"idempotencyKey": key})


async def test_a_dead_run_and_a_backlog_are_told_oldest_first(
    database: Database, clock: FrozenClock, receiver: Receiver
) -> None:
    jobs = Jobs(database, clock)
    await Targets(database, clock).put(TENANT, target(receiver, default=True))
    # The tenant's default target, the deadline read in UTC (no zone, no schedule).
    spec = JobSpec(retry=Retry(max_attempts=1), notify=Notify(deadline="02:00"))
    await jobs.put(TENANT, "feed", spec, "test")
    dead = await _die(jobs, clock, "feed")  # due 01:00Z
    waiting = [(await jobs.enqueue(TENANT, "feed", EnqueueRequest(), "test"))[0] for _ in range(4)]
    clock.advance(3600)
    # Two a look: the backlog drains over looks, none told twice.
    assert [await look(database, clock, batch=2) for _ in range(4)] == [2, 2, 1, 0]
    expected = {f"notify/deadlineMissed/{run.run_id}" for run in waiting}
    expected |= {f"notify/deadlineMissed/{dead.run_id}", f"notify/dead/{dead.run_id}"}
    assert await _keys(database) == expected


async def test_an_attempt_leased_too_long_is_told_once_per_attempt(
    database: Database, clock: FrozenClock, receiver: Receiver
) -> None:
    jobs = Jobs(database, clock)
    await Targets(database, clock).put(TENANT, target(receiver))
    spec = JobSpec(notify=Notify(target="ops", leased_longer_than_seconds=600))
    await jobs.put(TENANT, "export", spec, "test")
    run, _ = await jobs.enqueue(TENANT, "export", EnqueueRequest(), "test")
    shard = jobs.shard_of(TENANT, "export")
    async with database.connection(shard) as conn:
        await leases.claim(conn, shard, ["default"], 1, "worker-7", 3600, clock.now())
    clock.advance(599)
    assert await look(database, clock) == 0
    clock.advance(1)
    assert await look(database, clock) == 1
    clock.advance(600)
    assert await look(database, clock) == 0
    # The lease expires, the run is retried and leased again: its second attempt is
    # watched afresh.
    clock.advance(3600)
    async with database.connection(shard) as conn:
        await sweeps.reap(conn, now=clock.now(), rng=random.Random(1))
    clock.advance(3600)
    async with database.connection(shard) as conn:
        await sweeps.promote_due(conn, now=clock.now())
        [again] = await leases.claim(conn, shard, ["default"], 1, "worker-8", 3600, clock.now())
    assert again.attempt == 2
    clock.advance(600)
    assert await look(database, clock) == 1
    bodies = {key: body for _, key, body in await _deliveries(database)}
    assert set(bodies) == {
        f"notify/leasedTooLong/{run.run_id}/1",
        f"notify/leasedTooLong/{run.run_id}/2",
    }
    second = bodies[f"notify/leasedTooLong/{run.run_id}/2"]
    assert second["workerId"] == "worker-8" and second["leasedLongerThanSeconds"] == 600
    assert second["attempt"] == 2 and second["event"] == "leasedTooLong"


async def test_nothing_is_told_without_a_target_or_when_the_job_declines(
    database: Database, clock: FrozenClock, receiver: Receiver
) -> None:
    jobs = Jobs(database, clock)
    await Targets(database, clock).put(TENANT, target(receiver))  # not the default
    await jobs.put(TENANT, "nowhere", JobSpec(notify=Notify(deadline="02:00")), "test")
    declined = Notify(target="ops", deadline="02:00", on=[NotifyEvent.dead])
    await jobs.put(TENANT, "declined", JobSpec(notify=declined), "test")
    await jobs.enqueue(TENANT, "nowhere", EnqueueRequest(), "test")
    await jobs.enqueue(TENANT, "declined", EnqueueRequest(), "test")
    clock.advance(86400)
    assert await look(database, clock) == 0


async def test_the_scheduler_looks_and_the_notification_is_delivered(
    database: Database, clock: FrozenClock, receiver: Receiver, poster: WebhookPoster
) -> None:
    jobs = Jobs(database, clock)
    await Targets(database, clock).put(TENANT, target(receiver))
    spec = JobSpec(notify=Notify(target="ops", deadline="01:30"))
    await jobs.put(TENANT, "report", spec, "test")
    run, _ = await jobs.enqueue(TENANT, "report", EnqueueRequest(), "test")
    clock.advance(1800)
    reports = await Scheduler(database, clock=clock).pass_once()
    assert sum(report.notified for report in reports) == 1
    dispatcher = Dispatcher(database, clock, random.Random(7))
    deliveries = Deliveries(database, dispatcher, poster, environ=ENVIRON)
    assert await deliveries.deliver_ready() == 1
    [(headers, body)] = receiver.received
    assert headers["X-Tickwork-Event"] == "deadlineMissed"
    notice = orjson.loads(body)
    assert notice["runId"] == run.run_id and notice["deadline"] == "2026-03-15T01:30:00Z"
    assert notice["idempotencyKey"] == f"notify/deadlineMissed/{run.run_id}"


@pytest.mark.parametrize(
    ("notify", "message"),
    [
        ({"deadline": "6:00"}, "HH:MM"),
        ({"deadline": "24:00"}, "HH:MM"),
        ({"timeZone": "Mars/Olympus", "deadline": "06:00"}, "time zone"),
        ({"leasedLongerThanSeconds": 0}, "greater than or equal"),
    ],
)
def test_bad_watches_are_refused(notify: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        JobSpec.model_validate({"notify": notify})


def test_a_watch_is_kept_as_written() -> None:
    spec = JobSpec.model_validate(
        {"notify": {"deadline": "06:00", "timeZone": BERLIN, "leasedLongerThanSeconds": 60}}
    )
    assert spec.to_document()["notify"] == {
        "on": ["dead", "autoPaused", "deadlineMissed", "leasedTooLong"],
        "deadline": "06:00",
        "timeZone": BERLIN,
        "leasedLongerThanSeconds": 60,
    }
