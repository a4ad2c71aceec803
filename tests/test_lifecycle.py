"""The run state machine, end to end through ``Jobs``, ``Dispatcher`` and the store.

Every transition of "Run states" is driven here the way the API and the scheduler
drive it, with time moved by the ``FrozenClock``; every illegal move is refused and
leaves the run row, its attempts and the audit log exactly as they were.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from tickwork.core import shards
from tickwork.core.clock import FrozenClock
from tickwork.core.errors import (
    IdempotencyKeyReused,
    InvalidRequest,
    InvalidState,
    NotFound,
    StaleLease,
)
from tickwork.core.records import Completed, Extended, Lease, NewRun, Origin, Outcome, Run, State
from tickwork.core.spec import JobSpec, Priority, Retry
from tickwork.engine.dispatch import CompleteItem, Dispatcher, HeartbeatItem
from tickwork.engine.jobs import Change, EnqueueRequest, Jobs, JobView
from tickwork.store import audit, dlq, runs, sweeps
from tickwork.store.database import Database

TENANT = "acme"
ACTOR = "alice@example.com"
QUEUES = ["default"]


class TopOfWindow(random.Random):
    """Draws the top of every backoff window, so retry times are exact."""

    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.fixture
def jobs(database: Database, clock: FrozenClock) -> Jobs:
    return Jobs(database, clock)


@pytest.fixture
def dispatcher(database: Database, clock: FrozenClock) -> Dispatcher:
    return Dispatcher(database, clock, TopOfWindow())


def spec(
    *,
    attempts: int = 3,
    base: float = 10,
    cap: float = 100,
    timeout: int = 3600,
    priority: Priority = Priority.default,
) -> JobSpec:
    """An API-only job (no schedule): runs exist only when enqueued."""
    return JobSpec(
        timeout_seconds=timeout,
        priority=priority,
        retry=Retry(max_attempts=attempts, base_seconds=base, max_seconds=cap),
    )


async def new_job(jobs: Jobs, name: str = "job", **kwargs: Any) -> None:
    await jobs.put(TENANT, name, spec(**kwargs), ACTOR)


async def enqueue(jobs: Jobs, name: str = "job", **request: Any) -> Run:
    run, created = await jobs.enqueue(TENANT, name, EnqueueRequest(**request), ACTOR)
    assert created
    return run


async def lease_one(dispatcher: Dispatcher, seconds: float = 30, worker: str = "w1") -> Lease:
    granted = await dispatcher.lease(QUEUES, limit=1, worker_id=worker, lease_seconds=seconds)
    assert len(granted) == 1, granted
    return granted[0]


async def state_of(jobs: Jobs, run_id: str) -> Run:
    run, _ = await jobs.run(run_id)
    return run


async def complete(
    dispatcher: Dispatcher,
    lease: Lease,
    outcome: Outcome = Outcome.succeeded,
    *,
    token: int | None = None,
    retryable: bool = True,
    error: dict[str, Any] | None = None,
) -> Completed | Exception:
    item = CompleteItem(
        lease.run_id,
        lease.fencing_token if token is None else token,
        outcome,
        error if error is not None or outcome is Outcome.succeeded else {"message": "boom"},
        retryable,
    )
    [result] = await dispatcher.complete([item])
    return result


async def heartbeat(
    dispatcher: Dispatcher, lease: Lease, seconds: float = 30, token: int | None = None
) -> Extended | Exception:
    item = HeartbeatItem(lease.run_id, lease.fencing_token if token is None else token, seconds)
    [result] = await dispatcher.heartbeat([item])
    return result


async def promote(database: Database, clock: FrozenClock) -> sweeps.Promoted:
    ready = skipped = 0
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            done = await sweeps.promote_due(conn, now=clock.now())
        ready, skipped = ready + done.ready, skipped + done.skipped
    return sweeps.Promoted(ready, skipped)


async def reap(database: Database, clock: FrozenClock) -> sweeps.Reaped:
    retried = dead = cancelled = 0
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            done = await sweeps.reap(conn, now=clock.now(), rng=TopOfWindow())
        retried, dead, cancelled = (
            retried + done.retried,
            dead + done.dead,
            cancelled + done.cancelled,
        )
    return sweeps.Reaped(retried, dead, cancelled)


@dataclass(frozen=True)
class Snapshot:
    run: dict[str, Any]
    attempts: list[dict[str, Any]]
    audit: list[dict[str, Any]]


async def snapshot(database: Database, run_id: str) -> Snapshot:
    """Everything stored about a run: to prove a refused request changed nothing."""
    shard, local = shards.parse_run_id(run_id, database.shard_count)
    async with database.connection(shard) as conn:
        row = await conn.fetchrow("SELECT * FROM runs WHERE id = $1", local)
        assert row is not None
        attempts = await conn.fetch(
            "SELECT * FROM run_attempts WHERE run_id = $1 ORDER BY fencing_token", local
        )
        audit = await conn.fetch("SELECT * FROM audit_log ORDER BY id")
        sequence = await conn.fetchval("SELECT last_value FROM fencing_tokens")
    return Snapshot(
        dict(row, sequence=sequence),
        [dict(a) for a in attempts],
        [dict(a) for a in audit],
    )


async def audit_actions(jobs: Jobs, database: Database, name: str = "job") -> list[tuple[str, str]]:
    shard = jobs.shard_of(TENANT, name)
    async with database.connection(shard) as conn:
        entries = await audit.page(conn, shard, TENANT, name, None, 100)
    return [(e.action, e.actor) for e in reversed(entries)]


def at(clock: FrozenClock, seconds: float = 0) -> datetime:
    return clock.now() + timedelta(seconds=seconds)


# --- enqueue -----------------------------------------------------------------------------


async def test_enqueue_now_is_ready_at_once(jobs: Jobs, clock: FrozenClock) -> None:
    await new_job(jobs)
    run = await enqueue(jobs, payload={"n": 1}, payload_given=True)
    assert run.state is State.ready
    assert run.ready_at == run.due_at == clock.now()
    assert run.attempt == 0 and run.max_attempts == 3
    assert run.origin is Origin.api
    assert run.payload == {"n": 1}
    assert run.effective_idempotency_key == f"{TENANT}/job#{run.run_id}"
    assert (await state_of(jobs, run.run_id)) == run


async def test_enqueue_at_a_future_instant_waits_scheduled(jobs: Jobs, clock: FrozenClock) -> None:
    await new_job(jobs)
    run = await enqueue(jobs, run_at=at(clock, 3600))
    assert run.state is State.scheduled
    assert run.ready_at == at(clock, 3600)


async def test_enqueue_at_a_past_instant_is_ready_now(jobs: Jobs, clock: FrozenClock) -> None:
    await new_job(jobs)
    run = await enqueue(jobs, run_at=at(clock, -3600))
    assert run.state is State.ready
    assert run.ready_at == clock.now()


async def test_enqueue_after_a_delay(jobs: Jobs, clock: FrozenClock) -> None:
    await new_job(jobs)
    run = await enqueue(jobs, delay_seconds=90)
    assert run.state is State.scheduled
    assert run.ready_at == at(clock, 90)


async def test_enqueue_with_both_instant_and_delay_is_refused(
    jobs: Jobs, clock: FrozenClock
) -> None:
    await new_job(jobs)
    with pytest.raises(InvalidRequest):
        await enqueue(jobs, run_at=at(clock, 10), delay_seconds=10)
    assert (await jobs.runs_of_job(TENANT, "job", None, None, 10))[0] == []


async def test_enqueue_for_an_unknown_job_is_not_found(jobs: Jobs) -> None:
    with pytest.raises(NotFound):
        await enqueue(jobs, "nope")


async def test_same_idempotency_key_returns_the_first_run(jobs: Jobs, clock: FrozenClock) -> None:
    await new_job(jobs)
    request = EnqueueRequest(idempotency_key="invoice-42", payload={"v": 1}, payload_given=True)
    first, created = await jobs.enqueue(TENANT, "job", request, ACTOR)
    clock.advance(60)
    again = EnqueueRequest(idempotency_key="invoice-42", payload={"v": 1}, payload_given=True)
    second, created_again = await jobs.enqueue(TENANT, "job", again, ACTOR)
    assert (created, created_again) == (True, False)
    assert second == first
    assert second.payload == {"v": 1}
    assert first.effective_idempotency_key == "invoice-42"
    # The key used for another request is refused, and nothing changes.
    other = EnqueueRequest(idempotency_key="invoice-42", payload={"v": 2}, payload_given=True)
    with pytest.raises(IdempotencyKeyReused, match=first.run_id):
        await jobs.enqueue(TENANT, "job", other, ACTOR)
    page, _ = await jobs.runs_of_job(TENANT, "job", None, None, 10)
    assert [r.run_id for r in page] == [first.run_id]
    assert first.request_fingerprint == request.fingerprint() != other.fingerprint()


async def test_concurrent_enqueues_with_one_key_make_one_run(jobs: Jobs) -> None:
    await new_job(jobs)
    request = EnqueueRequest(idempotency_key="once")
    results = await asyncio.gather(*(jobs.enqueue(TENANT, "job", request, ACTOR) for _ in range(6)))
    assert len({run.run_id for run, _ in results}) == 1
    assert sorted(created for _, created in results) == [False] * 5 + [True]
    page, _ = await jobs.runs_of_job(TENANT, "job", None, None, 10)
    assert len(page) == 1


async def test_idempotency_keys_are_per_job(jobs: Jobs) -> None:
    await new_job(jobs, "a")
    await new_job(jobs, "b")
    a = await enqueue(jobs, "a", idempotency_key="k")
    b = await enqueue(jobs, "b", idempotency_key="k")
    assert a.run_id != b.run_id


# --- scheduled → ready → leased → succeeded ---------------------------------------------


async def test_scheduled_run_becomes_ready_when_due_and_not_before(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs)
    run = await enqueue(jobs, delay_seconds=60)
    clock.advance(59)
    assert await promote(database, clock) == sweeps.Promoted(0, 0)
    assert await dispatcher.lease(QUEUES, limit=10, worker_id="w1", lease_seconds=30) == []
    assert (await state_of(jobs, run.run_id)).state is State.scheduled

    clock.advance(1)
    assert await promote(database, clock) == sweeps.Promoted(ready=1, skipped=0)
    assert (await state_of(jobs, run.run_id)).state is State.ready
    assert (await lease_one(dispatcher)).run_id == run.run_id


async def test_ready_run_is_leased_with_a_fencing_token(
    jobs: Jobs, dispatcher: Dispatcher, clock: FrozenClock
) -> None:
    await new_job(jobs, timeout=600)
    run = await enqueue(jobs, idempotency_key="k1", payload=[1, 2], payload_given=True)
    clock.advance(5)
    lease = await lease_one(dispatcher, seconds=30, worker="w-7")
    assert (lease.run_id, lease.tenant, lease.job, lease.queue) == (
        run.run_id,
        TENANT,
        "job",
        "default",
    )
    assert lease.attempt == 1 and lease.max_attempts == 3
    assert lease.fencing_token > 0
    assert lease.leased_at == clock.now()
    assert lease.lease_expires_at == at(clock, 30)
    assert lease.deadline == at(clock, 600)
    assert lease.payload_json is not None and lease.payload_json.replace(" ", "") == "[1,2]"
    assert lease.effective_idempotency_key == "k1"

    current, history = await jobs.run(run.run_id)
    assert current.state is State.leased
    assert current.lease_owner == "w-7"
    assert current.fencing_token == lease.fencing_token
    assert [(a.attempt, a.fencing_token, a.worker_id, a.outcome) for a in history] == [
        (1, lease.fencing_token, "w-7", None)
    ]
    # Nobody else can lease it now.
    assert await dispatcher.lease(QUEUES, limit=10, worker_id="w2", lease_seconds=30) == []


async def test_a_long_poll_answered_by_its_first_look_keeps_its_runs(
    jobs: Jobs, dispatcher: Dispatcher
) -> None:
    # Only a poll that waited asks whether its caller went away; one answered at once
    # is as fresh as a call that does not wait, and the question costs a loop turn.
    await new_job(jobs)
    run = await enqueue(jobs)
    asked = 0

    async def gone() -> bool:
        nonlocal asked
        asked += 1
        return True  # were it asked, the run would be given back

    granted = await dispatcher.lease(
        QUEUES, limit=1, worker_id="w1", lease_seconds=30, wait_seconds=5, gone=gone
    )
    assert [lease.run_id for lease in granted] == [run.run_id]
    assert asked == 0


async def test_a_short_timeout_caps_the_first_lease(
    jobs: Jobs, dispatcher: Dispatcher, clock: FrozenClock
) -> None:
    await new_job(jobs, timeout=10)
    await enqueue(jobs)
    lease = await lease_one(dispatcher, seconds=30)
    assert lease.lease_expires_at == lease.deadline == at(clock, 10)


async def test_leased_run_succeeds(jobs: Jobs, dispatcher: Dispatcher, clock: FrozenClock) -> None:
    await new_job(jobs)
    run = await enqueue(jobs)
    lease = await lease_one(dispatcher, worker="w1")
    clock.advance(12)
    result = await complete(dispatcher, lease)
    assert result == Completed(lease.id, State.succeeded, None)

    current, history = await jobs.run(run.run_id)
    assert current.state is State.succeeded and current.state.terminal
    assert current.finished_at == clock.now()
    assert current.lease_expires_at is None
    assert [(a.attempt, a.outcome, a.finished_at) for a in history] == [
        (1, "succeeded", clock.now())
    ]
    assert await dispatcher.lease(QUEUES, limit=10, worker_id="w2", lease_seconds=30) == []
    view = await jobs.get(TENANT, "job")
    assert view.summary.last_run is not None and view.summary.last_run.run_id == run.run_id
    assert view.summary.active == 0


# --- failures, retries, dead ---------------------------------------------------------------


async def test_failed_attempt_waits_for_its_backoff_then_retries(
    jobs: Jobs, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs, attempts=3, base=10, cap=100)
    run = await enqueue(jobs)
    # A real random source: the delay is anywhere in [0, 10 s].
    dispatcher = Dispatcher(database, clock, random.Random(4))
    first = await lease_one(dispatcher)
    result = await complete(dispatcher, first, Outcome.failed, error={"message": "db down"})
    assert isinstance(result, Completed) and result.state is State.retry_wait
    assert result.next_attempt_at is not None
    assert clock.now() <= result.next_attempt_at <= at(clock, 10)

    current = await state_of(jobs, run.run_id)
    assert current.state is State.retry_wait
    assert current.ready_at == result.next_attempt_at
    assert current.last_error["message"] == "db down"
    assert current.last_error["attempt"] == 1
    assert current.finished_at is None

    clock.set(result.next_attempt_at)
    assert await promote(database, clock) == sweeps.Promoted(ready=1, skipped=0)
    assert (await state_of(jobs, run.run_id)).state is State.ready
    second = await lease_one(dispatcher)
    assert second.attempt == 2
    assert second.fencing_token > first.fencing_token
    result = await complete(dispatcher, second, Outcome.failed)
    assert isinstance(result, Completed) and result.next_attempt_at is not None
    assert clock.now() <= result.next_attempt_at <= at(clock, 20)


async def test_retry_wait_is_not_ready_before_its_time(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs, attempts=5, base=10, cap=25)
    run = await enqueue(jobs)
    expected_waits = [10, 20, 25, 25]  # base * 2^(n-1), capped at maxSeconds
    for attempt, wait in enumerate(expected_waits, start=1):
        lease = await lease_one(dispatcher)
        assert lease.attempt == attempt
        result = await complete(dispatcher, lease, Outcome.failed)
        assert result == Completed(lease.id, State.retry_wait, at(clock, wait))
        clock.advance(wait - 0.001)
        assert await promote(database, clock) == sweeps.Promoted(0, 0)
        assert await dispatcher.lease(QUEUES, limit=1, worker_id="w1", lease_seconds=30) == []
        clock.advance(0.001)
        assert await promote(database, clock) == sweeps.Promoted(1, 0)
    last = await lease_one(dispatcher)
    assert await complete(dispatcher, last, Outcome.failed) == Completed(last.id, State.dead, None)
    assert (await state_of(jobs, run.run_id)).attempt == 5


async def test_run_is_dead_when_attempts_are_exhausted(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs, attempts=2, base=0, cap=0)
    run = await enqueue(jobs)
    first = await lease_one(dispatcher)
    assert await complete(dispatcher, first, Outcome.failed) == Completed(
        first.id, State.retry_wait, clock.now()
    )
    await promote(database, clock)
    second = await lease_one(dispatcher)
    result = await complete(
        dispatcher, second, Outcome.failed, error={"message": "still down", "code": 503}
    )
    assert result == Completed(second.id, State.dead, None)

    current, history = await jobs.run(run.run_id)
    assert current.state is State.dead and current.finished_at == clock.now()
    assert current.last_error["message"] == "still down"
    assert current.last_error["code"] == 503
    assert [(a.attempt, a.outcome) for a in history] == [(1, "failed"), (2, "failed")]
    # Visible in the dead-letter queue with its last error; never leased again.
    shard = jobs.shard_of(TENANT, "job")
    async with database.connection(shard) as conn:
        dead = await dlq.list_dead(conn, shard, TENANT, "job", None, 10)
    assert [d.run_id for d in dead] == [run.run_id]
    assert dead[0].last_error["message"] == "still down"
    assert await promote(database, clock) == sweeps.Promoted(0, 0)
    assert await dispatcher.lease(QUEUES, limit=10, worker_id="w1", lease_seconds=30) == []
    assert (await jobs.get(TENANT, "job")).summary.dead == 1


async def test_a_non_retryable_failure_is_dead_at_once(jobs: Jobs, dispatcher: Dispatcher) -> None:
    await new_job(jobs, attempts=5)
    run = await enqueue(jobs)
    lease = await lease_one(dispatcher)
    result = await complete(
        dispatcher, lease, Outcome.failed, retryable=False, error={"message": "bad input"}
    )
    assert result == Completed(lease.id, State.dead, None)
    current = await state_of(jobs, run.run_id)
    assert current.state is State.dead and current.attempt == 1
    assert current.last_error["retryable"] is False
    assert current.last_error["message"] == "bad input"


# --- lease expiry and the reaper ---------------------------------------------------------


async def test_expired_lease_is_reaped_to_retry_wait(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs, attempts=3, base=10, cap=100)
    run = await enqueue(jobs)
    lease = await lease_one(dispatcher, seconds=30)
    clock.advance(29.9)
    assert (await reap(database, clock)).total == 0
    assert (await state_of(jobs, run.run_id)).state is State.leased

    clock.advance(0.1)
    assert await reap(database, clock) == sweeps.Reaped(retried=1, dead=0, cancelled=0)
    current, history = await jobs.run(run.run_id)
    assert current.state is State.retry_wait
    assert current.ready_at == at(clock, 10)
    assert current.last_error["reason"] == "lease-expired"
    assert [(a.attempt, a.fencing_token, a.outcome) for a in history] == [
        (1, lease.fencing_token, "lease-expired")
    ]
    clock.advance(10)
    await promote(database, clock)
    again = await lease_one(dispatcher)
    assert again.attempt == 2 and again.fencing_token > lease.fencing_token


async def test_expired_lease_with_no_attempts_left_is_dead(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs, attempts=1)
    run = await enqueue(jobs)
    await lease_one(dispatcher, seconds=30)
    clock.advance(31)
    assert await reap(database, clock) == sweeps.Reaped(retried=0, dead=1, cancelled=0)
    current = await state_of(jobs, run.run_id)
    assert current.state is State.dead
    assert current.last_error["reason"] == "lease-expired"


async def test_heartbeats_keep_a_lease_from_the_reaper(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs)
    run = await enqueue(jobs)
    lease = await lease_one(dispatcher, seconds=30)
    for _ in range(5):
        clock.advance(20)
        beat = await heartbeat(dispatcher, lease, 30)
        assert isinstance(beat, Extended)
        assert beat.lease_expires_at == at(clock, 30) and not beat.cancel_requested
        assert (await reap(database, clock)).total == 0
    assert (await state_of(jobs, run.run_id)).lease_expires_at == at(clock, 30)
    assert await complete(dispatcher, lease) == Completed(lease.id, State.succeeded, None)


async def test_heartbeat_never_extends_past_the_timeout(
    jobs: Jobs, dispatcher: Dispatcher, clock: FrozenClock
) -> None:
    await new_job(jobs, timeout=100)
    await enqueue(jobs)
    lease = await lease_one(dispatcher, seconds=30)
    clock.advance(20)
    beat = await heartbeat(dispatcher, lease, 3600)
    assert isinstance(beat, Extended)
    assert beat.lease_expires_at == lease.deadline == lease.leased_at + timedelta(seconds=100)
    clock.advance(70)
    beat = await heartbeat(dispatcher, lease, 30)
    assert isinstance(beat, Extended) and beat.lease_expires_at == lease.deadline


async def test_no_single_extension_goes_past_six_hours(
    jobs: Jobs, dispatcher: Dispatcher, clock: FrozenClock
) -> None:
    await new_job(jobs, timeout=7 * 24 * 3600)
    await enqueue(jobs)
    lease = await lease_one(dispatcher, seconds=30)
    clock.advance(60)
    beat = await heartbeat(dispatcher, lease, 24 * 3600)
    assert isinstance(beat, Extended)
    assert beat.lease_expires_at == at(clock, 6 * 3600)


# --- cancel --------------------------------------------------------------------------------


@pytest.mark.parametrize("start", [State.scheduled, State.ready, State.retry_wait])
async def test_cancel_a_pending_run(
    jobs: Jobs,
    dispatcher: Dispatcher,
    database: Database,
    clock: FrozenClock,
    start: State,
) -> None:
    await new_job(jobs)
    run = await enqueue(jobs, delay_seconds=60 if start is State.scheduled else None)
    if start is State.retry_wait:
        lease = await lease_one(dispatcher)
        await complete(dispatcher, lease, Outcome.failed)
    assert (await state_of(jobs, run.run_id)).state is start

    clock.advance(1)
    cancelled = await jobs.cancel(run.run_id, ACTOR)
    assert cancelled.state is State.cancelled and cancelled.finished_at == clock.now()
    assert (await state_of(jobs, run.run_id)).state is State.cancelled
    assert ("cancel", ACTOR) in await audit_actions(jobs, database)
    # Nothing brings it back.
    clock.advance(3600)
    assert await promote(database, clock) == sweeps.Promoted(0, 0)
    assert await dispatcher.lease(QUEUES, limit=10, worker_id="w1", lease_seconds=30) == []
    # Cancelling again answers the cancelled run and records nothing new.
    before = await snapshot(database, run.run_id)
    assert (await jobs.cancel(run.run_id, ACTOR)).state is State.cancelled
    assert await snapshot(database, run.run_id) == before


@pytest.mark.parametrize("outcome", [Outcome.succeeded, Outcome.failed])
async def test_cancel_a_leased_run_finishes_its_lease(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, outcome: Outcome
) -> None:
    await new_job(jobs, attempts=3)
    run = await enqueue(jobs)
    lease = await lease_one(dispatcher)
    requested = await jobs.cancel(run.run_id, ACTOR)
    assert requested.state is State.leased and requested.cancel_requested

    beat = await heartbeat(dispatcher, lease)
    assert isinstance(beat, Extended) and beat.cancel_requested
    result = await complete(dispatcher, lease, outcome)
    assert result == Completed(lease.id, State.cancelled, None)
    current, history = await jobs.run(run.run_id)
    assert current.state is State.cancelled
    assert history[-1].fencing_token == lease.fencing_token
    assert await dispatcher.lease(QUEUES, limit=10, worker_id="w1", lease_seconds=30) == []
    assert ("cancel", ACTOR) in await audit_actions(jobs, database)


async def test_reaping_a_cancel_requested_lease_cancels_it(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs, attempts=3)
    run = await enqueue(jobs)
    await lease_one(dispatcher, seconds=30)
    await jobs.cancel(run.run_id, ACTOR)
    clock.advance(31)
    assert await reap(database, clock) == sweeps.Reaped(retried=0, dead=0, cancelled=1)
    assert (await state_of(jobs, run.run_id)).state is State.cancelled


@pytest.mark.parametrize("end", [State.succeeded, State.dead, State.discarded, State.skipped])
async def test_cancel_a_finished_run_is_refused_and_changes_nothing(
    jobs: Jobs,
    dispatcher: Dispatcher,
    database: Database,
    clock: FrozenClock,
    end: State,
) -> None:
    await new_job(jobs, attempts=1)
    if end is State.skipped:
        run = await insert_with_deadline(jobs, database, clock, ready_in=0, deadline_in=10)
        clock.advance(11)
        await promote(database, clock)
    else:
        run = await enqueue(jobs)
        lease = await lease_one(dispatcher)
        ok = end is State.succeeded
        await complete(dispatcher, lease, Outcome.succeeded if ok else Outcome.failed)
        if end is State.discarded:
            await jobs_discard(jobs, database, run.run_id)
    assert (await state_of(jobs, run.run_id)).state is end
    before = await snapshot(database, run.run_id)
    with pytest.raises(InvalidState, match=end.value):
        await jobs.cancel(run.run_id, ACTOR)
    assert await snapshot(database, run.run_id) == before


async def test_cancel_an_unknown_run_is_not_found(jobs: Jobs) -> None:
    with pytest.raises(NotFound):
        await jobs.cancel("r0-999999", ACTOR)
    with pytest.raises(NotFound):
        await jobs.cancel("not-a-run", ACTOR)


# --- dead-letter queue ---------------------------------------------------------------------


async def jobs_replay(jobs: Jobs, database: Database, run_id: str, actor: str = ACTOR) -> Run:
    shard, local = shards.parse_run_id(run_id, database.shard_count)
    async with database.connection(shard) as conn:
        return await dlq.act(conn, shard, local, "replay", actor, jobs.clock.now())


async def jobs_discard(jobs: Jobs, database: Database, run_id: str, actor: str = ACTOR) -> Run:
    shard, local = shards.parse_run_id(run_id, database.shard_count)
    async with database.connection(shard) as conn:
        return await dlq.act(conn, shard, local, "discard", actor, jobs.clock.now())


async def dead_run(jobs: Jobs, dispatcher: Dispatcher, **request: Any) -> tuple[Run, Lease]:
    run = await enqueue(jobs, **request)
    lease = await lease_one(dispatcher)
    result = await complete(dispatcher, lease, Outcome.failed, retryable=False)
    assert isinstance(result, Completed) and result.state is State.dead
    return run, lease


async def test_replay_a_dead_run_with_a_fresh_attempt_budget(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs, attempts=2, base=0, cap=0)
    run = await enqueue(jobs, idempotency_key="inv-7")
    spent = []
    for _ in range(2):  # both attempts fail: dead
        lease = await lease_one(dispatcher, worker="w-old")
        spent.append(lease.fencing_token)
        await complete(dispatcher, lease, Outcome.failed, error={"message": "down"})
        await promote(database, clock)
    assert (await state_of(jobs, run.run_id)).state is State.dead

    clock.advance(300)
    replayed = await jobs_replay(jobs, database, run.run_id, "bob@example.com")
    assert replayed.state is State.ready
    assert replayed.attempt == 0
    assert replayed.ready_at == clock.now()
    assert replayed.finished_at is None
    assert replayed.idempotency_key == "inv-7"
    assert ("replay", "bob@example.com") in await audit_actions(jobs, database)
    shard = jobs.shard_of(TENANT, "job")
    async with database.connection(shard) as conn:
        assert await dlq.list_dead(conn, shard, TENANT, None, None, 10) == []

    # The full budget again: one retry, then success.
    first = await lease_one(dispatcher, worker="w-new")
    assert first.attempt == 1 and first.fencing_token > spent[-1]
    assert first.effective_idempotency_key == "inv-7"
    result = await complete(dispatcher, first, Outcome.failed)
    assert isinstance(result, Completed) and result.state is State.retry_wait
    await promote(database, clock)
    second = await lease_one(dispatcher, worker="w-new")
    assert second.attempt == 2
    assert await complete(dispatcher, second) == Completed(second.id, State.succeeded, None)

    # History reads in the order things happened, the replay's attempts after the old.
    _, history = await jobs.run(run.run_id)
    assert [(h.attempt, h.worker_id, h.outcome) for h in history] == [
        (1, "w-old", "failed"),
        (2, "w-old", "failed"),
        (1, "w-new", "failed"),
        (2, "w-new", "succeeded"),
    ]
    assert [h.fencing_token for h in history] == [*spent, first.fencing_token, second.fencing_token]


async def test_discard_a_dead_run(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs)
    run, _ = await dead_run(jobs, dispatcher)
    discarded = await jobs_discard(jobs, database, run.run_id, "carol@example.com")
    assert discarded.state is State.discarded and discarded.state.terminal
    assert ("discard", "carol@example.com") in await audit_actions(jobs, database)
    shard = jobs.shard_of(TENANT, "job")
    async with database.connection(shard) as conn:
        assert await dlq.list_dead(conn, shard, TENANT, None, None, 10) == []
    before = await snapshot(database, run.run_id)
    with pytest.raises(InvalidState, match="discarded"):
        await jobs_replay(jobs, database, run.run_id)
    # The same discard again (a client that lost the answer) gets the same answer.
    again = await jobs_discard(jobs, database, run.run_id, "carol@example.com")
    assert (again.run_id, again.state) == (run.run_id, State.discarded)
    assert await snapshot(database, run.run_id) == before
    assert [a for a in await audit_actions(jobs, database) if a[0] == "discard"] == [
        ("discard", "carol@example.com")
    ]


async def test_replaying_a_replayed_run_again_answers_the_run_it_revived(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs)
    run, _ = await dead_run(jobs, dispatcher)
    first = await jobs_replay(jobs, database, run.run_id, "bob@example.com")
    lease = await lease_one(dispatcher)  # it moved on since: leased
    again = await jobs_replay(jobs, database, run.run_id, "bob@example.com")
    assert (again.run_id, again.state, again.attempt) == (first.run_id, State.leased, 1)
    assert again.fencing_token == lease.fencing_token  # nothing done twice: one attempt
    replays = [a for a in await audit_actions(jobs, database) if a[0] == "replay"]
    assert replays == [("replay", "bob@example.com")]
    # Dead again: a replay is a new replay.
    await complete(dispatcher, lease, Outcome.failed, retryable=False)
    assert (await state_of(jobs, run.run_id)).state is State.dead
    assert (await jobs_replay(jobs, database, run.run_id)).state is State.ready


@pytest.mark.parametrize("state", [State.ready, State.leased, State.succeeded, State.scheduled])
async def test_replay_or_discard_of_a_run_that_is_not_dead_is_refused(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, state: State
) -> None:
    await new_job(jobs)
    run = await enqueue(jobs, delay_seconds=60 if state is State.scheduled else None)
    if state in (State.leased, State.succeeded):
        lease = await lease_one(dispatcher)
        if state is State.succeeded:
            await complete(dispatcher, lease)
    before = await snapshot(database, run.run_id)
    with pytest.raises(InvalidState, match=f"it is {state.value}"):
        await jobs_replay(jobs, database, run.run_id)
    with pytest.raises(InvalidState, match=f"it is {state.value}"):
        await jobs_discard(jobs, database, run.run_id)
    assert await snapshot(database, run.run_id) == before


async def test_replay_of_an_unknown_run_is_not_found(jobs: Jobs, database: Database) -> None:
    with pytest.raises(NotFound):
        await jobs_replay(jobs, database, "r1-424242")
    with pytest.raises(NotFound):
        await jobs_discard(jobs, database, "r1-424242")


# --- starting deadline ---------------------------------------------------------------------


async def insert_with_deadline(
    jobs: Jobs, database: Database, clock: FrozenClock, *, ready_in: float, deadline_in: float
) -> Run:
    """A cron-like run with a starting deadline (what the materialiser inserts)."""
    shard = jobs.shard_of(TENANT, "job")
    due = at(clock, ready_in)
    new = NewRun(
        tenant=TENANT,
        job="job",
        queue="default",
        priority=Priority.default.rank,
        origin=Origin.cron,
        max_attempts=3,
        retry_base=0,
        retry_max=0,
        timeout_seconds=3600,
        due_at=due,
        ready_at=due,
        start_deadline=at(clock, deadline_in),
        idempotency_key=f"{TENANT}/job@{due.isoformat()}",
    )
    async with database.transaction(shard) as conn:
        run, created = await runs.insert(conn, shard, new, clock.now())
    assert created
    return run


async def test_a_run_due_past_its_starting_deadline_is_skipped(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs)
    run = await insert_with_deadline(jobs, database, clock, ready_in=60, deadline_in=120)
    assert run.state is State.scheduled
    clock.advance(121)  # the scheduler was down until after the deadline
    assert await promote(database, clock) == sweeps.Promoted(ready=0, skipped=1)
    current = await state_of(jobs, run.run_id)
    assert current.state is State.skipped and current.state.terminal
    assert current.finished_at == clock.now()
    assert await dispatcher.lease(QUEUES, limit=10, worker_id="w1", lease_seconds=30) == []


async def test_a_ready_run_nobody_leased_before_its_deadline_is_skipped(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs)
    run = await insert_with_deadline(jobs, database, clock, ready_in=0, deadline_in=30)
    assert run.state is State.ready
    clock.advance(30)
    assert await promote(database, clock) == sweeps.Promoted(0, 0)  # not past it yet
    clock.advance(1)
    assert await promote(database, clock) == sweeps.Promoted(ready=0, skipped=1)
    assert (await state_of(jobs, run.run_id)).state is State.skipped
    assert await dispatcher.lease(QUEUES, limit=10, worker_id="w1", lease_seconds=30) == []


async def test_a_run_started_in_time_is_never_skipped(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs)
    run = await insert_with_deadline(jobs, database, clock, ready_in=10, deadline_in=60)
    clock.advance(10)
    assert await promote(database, clock) == sweeps.Promoted(ready=1, skipped=0)
    lease = await lease_one(dispatcher)
    # Its retry comes after the deadline: a retry is not a late start.
    await complete(dispatcher, lease, Outcome.failed)
    clock.advance(120)
    assert await promote(database, clock) == sweeps.Promoted(ready=1, skipped=0)
    retry = await lease_one(dispatcher)
    assert retry.attempt == 2
    assert await complete(dispatcher, retry) == Completed(retry.id, State.succeeded, None)
    assert (await state_of(jobs, run.run_id)).state is State.succeeded


# --- fencing -------------------------------------------------------------------------------


async def test_stale_token_heartbeat_and_completion_change_nothing(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs, attempts=3, base=0, cap=0)
    run = await enqueue(jobs)
    old = await lease_one(dispatcher, seconds=30, worker="slow")
    clock.advance(31)
    await reap(database, clock)
    await promote(database, clock)
    new = await lease_one(dispatcher, seconds=30, worker="fast")
    assert new.fencing_token > old.fencing_token

    before = await snapshot(database, run.run_id)
    beat = await heartbeat(dispatcher, old, 300)
    assert isinstance(beat, StaleLease) and beat.status == 409
    for outcome in Outcome:
        result = await complete(dispatcher, old, outcome)
        assert isinstance(result, StaleLease), result
    # A made-up token newer than any issued is refused as well.
    assert isinstance(await complete(dispatcher, new, token=new.fencing_token + 1000), StaleLease)
    assert await snapshot(database, run.run_id) == before

    assert await complete(dispatcher, new) == Completed(new.id, State.succeeded, None)


async def test_completing_a_run_that_was_never_leased_is_stale(
    jobs: Jobs, dispatcher: Dispatcher, database: Database
) -> None:
    await new_job(jobs)
    ready = await enqueue(jobs)
    scheduled = await enqueue(jobs, delay_seconds=60)
    for run in (ready, scheduled):
        before = await snapshot(database, run.run_id)
        [result] = await dispatcher.complete([CompleteItem(run.run_id, 1, Outcome.succeeded)])
        assert isinstance(result, StaleLease)
        [beat] = await dispatcher.heartbeat([HeartbeatItem(run.run_id, 1, 30)])
        assert isinstance(beat, StaleLease)
        assert await snapshot(database, run.run_id) == before


async def test_heartbeat_of_a_finished_or_waiting_run_is_stale(
    jobs: Jobs, dispatcher: Dispatcher, database: Database
) -> None:
    await new_job(jobs, attempts=2)
    await enqueue(jobs)
    lease = await lease_one(dispatcher)
    await complete(dispatcher, lease, Outcome.failed)  # now retry_wait
    before = await snapshot(database, lease.run_id)
    assert isinstance(await heartbeat(dispatcher, lease), StaleLease)
    assert await snapshot(database, lease.run_id) == before


async def test_repeating_a_completion_gives_the_same_answer(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs, attempts=2, base=10, cap=10)
    await enqueue(jobs, idempotency_key="a")
    failed = await lease_one(dispatcher)
    first = await complete(dispatcher, failed, Outcome.failed)
    assert first == Completed(failed.id, State.retry_wait, at(clock, 10))
    before = await snapshot(database, failed.run_id)
    clock.advance(3)
    assert await complete(dispatcher, failed, Outcome.failed) == first
    assert await snapshot(database, failed.run_id) == before

    clock.advance(7)
    await promote(database, clock)
    last = await lease_one(dispatcher)
    dead = await complete(dispatcher, last, Outcome.failed)
    assert dead == Completed(last.id, State.dead, None)
    assert await complete(dispatcher, last, Outcome.failed) == dead
    # The earlier attempt's answer does not change when the run moves on.
    assert await complete(dispatcher, failed, Outcome.failed) == first

    await enqueue(jobs, idempotency_key="b")
    ok = await lease_one(dispatcher)
    done = await complete(dispatcher, ok)
    before = await snapshot(database, ok.run_id)
    assert await complete(dispatcher, ok) == done == Completed(ok.id, State.succeeded, None)
    assert await snapshot(database, ok.run_id) == before


async def test_completion_and_heartbeat_of_an_unknown_run_are_not_found(
    dispatcher: Dispatcher,
) -> None:
    for run_id in ("r0-987654", "r3-1", "r99-1", "garbage", ""):
        [result] = await dispatcher.complete([CompleteItem(run_id, 1, Outcome.succeeded)])
        assert isinstance(result, NotFound), run_id
        [beat] = await dispatcher.heartbeat([HeartbeatItem(run_id, 1, 30)])
        assert isinstance(beat, NotFound), run_id


async def test_batch_completion_answers_each_item_in_order(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    names = ["a", "b", "c", "e", "f"]  # on shards 0, 2, 2, 1, 3
    for name in names:
        await new_job(jobs, name, attempts=3, base=10, cap=10)
        await enqueue(jobs, name)
    granted = await dispatcher.lease(QUEUES, limit=10, worker_id="w1", lease_seconds=30)
    assert len(granted) == 5
    by_job = {lease.job: lease for lease in granted}
    a, b, c, e, f = (by_job[n] for n in names)
    assert len({shards.parse_run_id(x.run_id, 4)[0] for x in granted}) == 4

    items = [
        CompleteItem(b.run_id, b.fencing_token, Outcome.succeeded),
        CompleteItem(a.run_id, a.fencing_token + 100, Outcome.succeeded),  # stale
        CompleteItem("r2-999999", 5, Outcome.succeeded),  # unknown
        CompleteItem(c.run_id, c.fencing_token, Outcome.failed, {"message": "x"}),
        CompleteItem(e.run_id, e.fencing_token, Outcome.failed, {"message": "y"}, False),
        CompleteItem("nonsense", 1, Outcome.failed),  # malformed
        CompleteItem(f.run_id, f.fencing_token - 1, Outcome.failed),  # stale
        CompleteItem(a.run_id, a.fencing_token, Outcome.succeeded),
    ]
    results = await dispatcher.complete(items)
    assert [type(r).__name__ for r in results] == [
        "Completed",
        "StaleLease",
        "NotFound",
        "Completed",
        "Completed",
        "NotFound",
        "StaleLease",
        "Completed",
    ]
    assert results[0] == Completed(b.id, State.succeeded, None)
    assert results[3] == Completed(c.id, State.retry_wait, at(clock, 10))
    assert results[4] == Completed(e.id, State.dead, None)
    assert results[7] == Completed(a.id, State.succeeded, None)
    assert (await state_of(jobs, f.run_id)).state is State.leased

    beats = await dispatcher.heartbeat(
        [
            HeartbeatItem(f.run_id, f.fencing_token, 60),
            HeartbeatItem(a.run_id, a.fencing_token, 60),  # finished
            HeartbeatItem("r1-77777", 1, 60),
            HeartbeatItem(f.run_id, f.fencing_token - 1, 60),
        ]
    )
    assert [type(r).__name__ for r in beats] == ["Extended", "StaleLease", "NotFound", "StaleLease"]


async def test_attempt_history_has_one_row_per_attempt(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs, attempts=4, base=0, cap=0)
    run = await enqueue(jobs)
    tokens = []
    first = await lease_one(dispatcher, worker="w1", seconds=30)
    tokens.append(first.fencing_token)
    clock.advance(31)
    await reap(database, clock)  # attempt 1: lease expired
    await promote(database, clock)
    second = await lease_one(dispatcher, worker="w2")
    tokens.append(second.fencing_token)
    await complete(dispatcher, second, Outcome.failed, error={"message": "nope"})
    await promote(database, clock)
    third = await lease_one(dispatcher, worker="w3")
    tokens.append(third.fencing_token)

    _, history = await jobs.run(run.run_id)
    assert [(h.attempt, h.worker_id, h.outcome) for h in history] == [
        (1, "w1", "lease-expired"),
        (2, "w2", "failed"),
        (3, "w3", None),  # in flight
    ]
    assert history[1].error["message"] == "nope"
    clock.advance(5)
    await complete(dispatcher, third)
    _, history = await jobs.run(run.run_id)
    assert [h.fencing_token for h in history] == tokens == sorted(tokens)
    assert [h.outcome for h in history] == ["lease-expired", "failed", "succeeded"]
    assert history[2].finished_at == clock.now()


# --- who may move what: claims, promotion and reaping touch only their own states -------


async def test_loops_leave_other_states_alone(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs, attempts=3, base=1000, cap=1000)
    scheduled = await enqueue(jobs, delay_seconds=600)
    waiting = await enqueue(jobs)
    lease = await lease_one(dispatcher)
    await complete(dispatcher, lease, Outcome.failed)  # retry_wait for 1000 s
    leased_run = await enqueue(jobs)
    held = await lease_one(dispatcher, seconds=300)
    done = await enqueue(jobs)
    await complete(dispatcher, await lease_one(dispatcher))
    everything = [scheduled, waiting, leased_run, done]
    before = [await snapshot(database, r.run_id) for r in everything]

    clock.advance(60)
    assert await promote(database, clock) == sweeps.Promoted(0, 0)
    assert (await reap(database, clock)).total == 0
    assert await dispatcher.lease(QUEUES, limit=100, worker_id="w9", lease_seconds=30) == []
    assert [await snapshot(database, r.run_id) for r in everything] == before
    assert held.run_id == leased_run.run_id


async def test_claims_take_the_most_urgent_oldest_run_first(
    jobs: Jobs, dispatcher: Dispatcher, clock: FrozenClock
) -> None:
    await new_job(jobs, "a", priority=Priority.bulk)
    await new_job(jobs, "d", priority=Priority.critical)  # same shard as "a"
    bulk = await enqueue(jobs, "a")
    clock.advance(1)
    critical = await enqueue(jobs, "d")
    clock.advance(1)
    later_bulk = await enqueue(jobs, "a")
    order = [(await lease_one(dispatcher)).run_id for _ in range(3)]
    assert order == [critical.run_id, bulk.run_id, later_bulk.run_id]


async def test_other_queues_are_not_leased(jobs: Jobs, dispatcher: Dispatcher) -> None:
    await jobs.put(TENANT, "job", JobSpec(queue="gpu"), ACTOR)
    run = await enqueue(jobs)
    assert await dispatcher.lease(["default"], limit=10, worker_id="w1", lease_seconds=30) == []
    [lease] = await dispatcher.lease(["default", "gpu"], limit=10, worker_id="w1", lease_seconds=30)
    assert lease.run_id == run.run_id and lease.queue == "gpu"


# --- definitions ---------------------------------------------------------------------------


def _names(page: Sequence[Any]) -> list[str]:
    return [(item.definition if isinstance(item, JobView) else item).name for item in page]


async def test_upsert_creates_then_replaces_a_definition(
    jobs: Jobs, database: Database, clock: FrozenClock
) -> None:
    stored = await jobs.put(TENANT, "job", spec(attempts=2), ACTOR)
    created = stored.definition
    assert stored.change is Change.created and created.generation == 1
    assert created.spec == spec(attempts=2)
    assert created.next_due_at is None  # API-only: nothing to materialise
    clock.advance(10)
    stored = await jobs.put(TENANT, "job", spec(attempts=5), "bob")
    updated = stored.definition
    assert stored.change is Change.updated
    assert updated.generation == 2
    assert updated.created_at == created.created_at
    assert updated.updated_at == clock.now()
    view = await jobs.get(TENANT, "job")
    assert view.definition.spec.retry.max_attempts == 5
    assert await audit_actions(jobs, database) == [("create", ACTOR), ("update", "bob")]
    # New runs use the new definition.
    assert (await enqueue(jobs)).max_attempts == 5


async def test_putting_the_same_spec_again_writes_nothing(
    jobs: Jobs, database: Database, clock: FrozenClock
) -> None:
    cron = JobSpec.model_validate({"schedule": {"cron": "0 * * * *"}, "queue": "billing"})
    first = (await jobs.put(TENANT, "job", cron, ACTOR)).definition
    clock.advance(10)
    # The same spec, written differently (defaults spelled out): still the same job.
    again = JobSpec.model_validate(
        {"schedule": {"cron": "0 * * * *", "timeZone": "UTC"}, "queue": "billing"}
    )
    stored = await jobs.put(TENANT, "job", again, "bob")
    assert stored.change is Change.unchanged
    assert stored.definition == first
    assert (await jobs.get(TENANT, "job")).definition == first  # no generation bump
    assert await audit_actions(jobs, database) == [("create", ACTOR)]


async def test_get_of_an_unknown_job_is_not_found(jobs: Jobs) -> None:
    with pytest.raises(NotFound, match="nope"):
        await jobs.get(TENANT, "nope")


async def test_one_off_job_is_due_at_its_instant(jobs: Jobs, clock: FrozenClock) -> None:
    definition = (await jobs.put(TENANT, "once", JobSpec(run_at=at(clock, 3600)), ACTOR)).definition
    assert definition.next_due_at == at(clock, 3600)


async def test_list_pages_through_jobs_of_every_shard_by_name(
    jobs: Jobs, database: Database
) -> None:
    names = sorted(f"job-{i:02d}" for i in range(23))
    for name in reversed(names):
        await new_job(jobs, name)
    await jobs.put("other-tenant", "job-00", spec(), ACTOR)
    assert len({jobs.shard_of(TENANT, n) for n in names}) == database.shard_count

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page, cursor = await jobs.list_jobs(TENANT, cursor, 5)
        seen += _names(page)
        pages += 1
        if cursor is None:
            break
    assert seen == names
    assert pages == 5
    page, cursor = await jobs.list_jobs(TENANT, None, 23)
    assert _names(page) == names and cursor is None
    assert _names((await jobs.list_jobs("nobody", None, 10))[0]) == []


async def test_delete_cancels_pending_runs_and_keeps_history(
    jobs: Jobs, dispatcher: Dispatcher, database: Database, clock: FrozenClock
) -> None:
    await new_job(jobs, attempts=3)
    await new_job(jobs, "d")  # same shard, must be untouched
    done = await enqueue(jobs)
    finished = await lease_one(dispatcher)
    await complete(dispatcher, finished)
    scheduled = await enqueue(jobs, delay_seconds=600)
    leased = await enqueue(jobs)
    lease = await lease_one(dispatcher)
    ready = await enqueue(jobs)
    neighbour = await enqueue(jobs, "d")

    assert await jobs.delete(TENANT, "job", ACTOR) == (2, 1)
    with pytest.raises(NotFound):
        await jobs.get(TENANT, "job")
    with pytest.raises(NotFound):
        await enqueue(jobs)
    with pytest.raises(NotFound):
        await jobs.delete(TENANT, "job", ACTOR)

    states = {r.run_id: (await state_of(jobs, r.run_id)).state for r in (done, scheduled, ready)}
    assert states == {
        done.run_id: State.succeeded,
        scheduled.run_id: State.cancelled,
        ready.run_id: State.cancelled,
    }
    current = await state_of(jobs, leased.run_id)
    assert current.state is State.leased and current.cancel_requested
    beat = await heartbeat(dispatcher, lease)
    assert isinstance(beat, Extended) and beat.cancel_requested
    assert await complete(dispatcher, lease) == Completed(lease.id, State.cancelled, None)
    _, history = await jobs.run(done.run_id)
    assert [h.outcome for h in history] == ["succeeded"]
    page, _ = await jobs.runs_of_job(TENANT, "job", None, None, 10)
    assert len(page) == 4
    assert ("delete", ACTOR) in await audit_actions(jobs, database)
    assert (await state_of(jobs, neighbour.run_id)).state is State.ready


async def test_pause_and_resume(jobs: Jobs, database: Database, clock: FrozenClock) -> None:
    created = (await jobs.put(TENANT, "job", spec(), ACTOR)).definition
    clock.advance(5)
    paused = await jobs.set_paused(TENANT, "job", True, "ops")
    assert paused.paused and paused.spec.paused
    assert paused.generation == created.generation + 1
    assert paused.updated_at == clock.now()
    again = await jobs.set_paused(TENANT, "job", True, "ops")
    assert again.generation == paused.generation and again.updated_at == paused.updated_at
    assert (await jobs.get(TENANT, "job")).definition.paused

    resumed = await jobs.set_paused(TENANT, "job", False, "ops")
    assert not resumed.paused and not resumed.spec.paused
    assert resumed.generation == paused.generation + 1
    actions = await audit_actions(jobs, database)
    # Pausing a paused job changed nothing, so nothing was recorded for it.
    assert [a for a, _ in actions] == ["create", "pause", "resume"]
    with pytest.raises(NotFound):
        await jobs.set_paused(TENANT, "nope", True, "ops")
