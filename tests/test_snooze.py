"""Snooze: a third outcome of a completion. The run waits ``delaySeconds`` in
``retry_wait`` and is leased again with the same attempt number (a new fencing token),
no attempt used and no DLQ entry, up to ``limits.MAX_SNOOZES`` snoozes a run; past them
a snooze counts as a failed attempt. Races against the reaper, a heartbeat and a second
completion of the same lease run on real concurrent connections."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from tickwork.core import limits
from tickwork.core.clock import FrozenClock
from tickwork.core.errors import StaleLease, TickworkError
from tickwork.core.records import Beat, Completed, Completion, Lease, Outcome, State
from tickwork.core.spec import JobSpec, Retry
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.store import leases, sweeps
from tickwork.store.database import Database

TENANT = "acme"
ACTOR = "test"


async def _leased(database: Database, clock: FrozenClock, spec: JobSpec | None = None) -> Lease:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "waits", spec or JobSpec(retry=Retry(max_attempts=2)), ACTOR)
    await jobs.enqueue(TENANT, "waits", EnqueueRequest(), ACTOR)
    shard = jobs.shard_of(TENANT, "waits")
    async with database.connection(shard) as conn:
        [lease] = await leases.claim(conn, shard, ["default"], 1, "w", 30, clock.now())
    return lease


async def _claim(database: Database, clock: FrozenClock, shard: int) -> list[Lease]:
    async with database.connection(shard) as conn:
        await sweeps.promote_due(conn, now=clock.now())
        return await leases.claim(conn, shard, ["default"], 1, "w", 30, clock.now())


def snooze(lease: Lease, seconds: float) -> Completion:
    return Completion(lease.id, lease.fencing_token, Outcome.snoozed, delay_seconds=seconds)


def failed(lease: Lease) -> Completion:
    return Completion(lease.id, lease.fencing_token, Outcome.failed)


async def _reported(
    database: Database, lease: Lease, completion: Completion, now: datetime
) -> Completed | TickworkError:
    """The answer to ``completion`` of ``lease``, reported on a connection of its own."""
    async with database.connection(lease.shard) as conn:
        return (await leases.complete(conn, lease.shard, [completion], now))[0]


async def test_a_snoozed_run_is_leased_again_after_its_delay_with_the_same_attempt(
    database: Database, clock: FrozenClock
) -> None:
    lease = await _leased(database, clock)
    shard = lease.shard
    answer = await _reported(database, lease, snooze(lease, 60), clock.now())
    assert answer == Completed(
        lease.id, State.retry_wait, clock.now() + timedelta(seconds=60), snoozed=True
    )
    clock.advance(59)
    assert await _claim(database, clock, shard) == []  # not before its delay
    clock.advance(1)
    [again] = await _claim(database, clock, shard)
    assert again.attempt == lease.attempt == 1  # no attempt used
    assert again.fencing_token > lease.fencing_token  # a new lease all the same
    # The old lease is fenced off: its token's completion changes nothing and answers
    # what it did (the snooze).
    async with database.connection(shard) as conn:
        [stale] = await leases.complete(
            conn, shard, [Completion(lease.id, lease.fencing_token, Outcome.succeeded)]
        )
        assert stale == answer
        [done] = await leases.complete(
            conn, shard, [Completion(again.id, again.fencing_token, Outcome.succeeded)]
        )
        assert done.state is State.succeeded  # type: ignore[union-attr]
        history = await conn.fetch(
            "SELECT attempt, fencing_token, outcome, result_state FROM run_attempts "
            "WHERE run_id = $1 ORDER BY fencing_token",
            lease.id,
        )
    # The run's history shows the snoozed lease and the one that finished, both attempt 1.
    assert [tuple(r) for r in history] == [
        (1, lease.fencing_token, "snoozed", "retry_wait"),
        (1, again.fencing_token, "succeeded", "succeeded"),
    ]


async def test_snoozing_uses_no_attempt_so_failures_still_get_every_retry(
    database: Database, clock: FrozenClock
) -> None:
    """maxAttempts 2: snoozed three times, the run still fails twice before it is dead,
    and the DLQ gets one entry, for the last failure."""
    lease = await _leased(database, clock)
    shard = lease.shard
    for _ in range(3):
        await _reported(database, lease, snooze(lease, 0), clock.now())
        clock.advance(1)
        [lease] = await _claim(database, clock, shard)
        assert lease.attempt == 1
    first = await _reported(database, lease, failed(lease), clock.now())
    assert first.state is State.retry_wait  # type: ignore[union-attr]
    clock.advance(3600)
    [lease] = await _claim(database, clock, shard)
    assert lease.attempt == 2
    last = await _reported(database, lease, failed(lease), clock.now())
    assert last.state is State.dead  # type: ignore[union-attr]
    async with database.connection(shard) as conn:
        assert await conn.fetchval("SELECT count(*) FROM finished_runs WHERE state = 'dead'") == 1


async def test_a_first_attempt_snoozed_past_its_starting_deadline_is_not_skipped(
    database: Database, clock: FrozenClock
) -> None:
    """The starting deadline is about starting: a run that started and snoozed has met
    it, though its attempt is given back (attempt 0 again while it waits)."""
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "waits", JobSpec(), ACTOR)
    await jobs.enqueue(TENANT, "waits", EnqueueRequest(), ACTOR)
    shard = jobs.shard_of(TENANT, "waits")
    async with database.connection(shard) as conn:
        await conn.execute(
            "UPDATE live_runs SET start_deadline = $1", clock.now() + timedelta(seconds=10)
        )
        [lease] = await leases.claim(conn, shard, ["default"], 1, "w", 30, clock.now())
        await leases.complete(conn, shard, [snooze(lease, 60)], clock.now())
    clock.advance(61)
    [again] = await _claim(database, clock, shard)
    assert again.id == lease.id and again.attempt == 1


async def test_past_the_most_snoozes_a_snooze_fails_the_attempt(
    database: Database, clock: FrozenClock
) -> None:
    lease = await _leased(database, clock)
    shard = lease.shard
    async with database.connection(shard) as conn:
        await conn.execute("UPDATE live_runs SET snoozes = $1", limits.MAX_SNOOZES)
        [answer] = await leases.complete(conn, shard, [snooze(lease, 5)], clock.now())
        assert isinstance(answer, Completed)
        assert answer.state is State.retry_wait and not answer.snoozed
        [attempt] = await conn.fetch(
            "SELECT attempt, outcome, error FROM attempts WHERE run_id = $1", lease.id
        )
    assert attempt["outcome"] == "failed"
    assert '"reason": "snooze-limit"' in attempt["error"]
    [again] = await _claim(database, clock.advance(3600) or clock, shard)
    assert again.attempt == 2  # this one used an attempt


async def test_a_snooze_of_a_run_asked_to_stop_ends_it_cancelled(
    database: Database, clock: FrozenClock
) -> None:
    lease = await _leased(database, clock)
    async with database.connection(lease.shard) as conn:
        await conn.execute("UPDATE live_runs SET cancel_requested = true")
        [answer] = await leases.complete(conn, lease.shard, [snooze(lease, 5)], clock.now())
    assert isinstance(answer, Completed) and answer.state is State.cancelled


async def test_repeating_a_snooze_answers_as_the_first_and_snoozes_once(
    database: Database, clock: FrozenClock
) -> None:
    lease = await _leased(database, clock)
    async with database.connection(lease.shard) as conn:
        [first] = await leases.complete(conn, lease.shard, [snooze(lease, 5)], clock.now())
        [again] = await leases.complete(conn, lease.shard, [snooze(lease, 5)], clock.now())
        assert await conn.fetchval("SELECT snoozes FROM live_runs") == 1
    assert again == first


async def _racing(database: Database, lease: Lease, now: datetime, rival: str) -> object:
    """What ``rival`` does to the lease, on a connection of its own."""
    async with database.connection(lease.shard) as conn:
        if rival == "reap":
            return await sweeps.reap(conn, now=now)
        if rival == "heartbeat":
            beat = Beat(lease.id, lease.fencing_token, 30)
            return (await leases.heartbeat(conn, lease.shard, [beat], now))[0]
        outcome = Outcome.succeeded if rival == "complete-succeeded" else Outcome.snoozed
        completion = Completion(lease.id, lease.fencing_token, outcome, delay_seconds=5)
        return (await leases.complete(conn, lease.shard, [completion], now))[0]


@pytest.mark.parametrize("rival", ["reap", "heartbeat", "complete-succeeded", "snooze"])
async def test_a_snooze_racing_another_act_on_its_lease_resolves_to_one_outcome(
    database: Database, clock: FrozenClock, rival: str
) -> None:
    """On two connections at once: the snooze and the reaper (the lease expired), a
    heartbeat, a success or a second snooze of the same lease. Whatever the order, the
    run has one outcome: one attempt record, and a run that is either snoozed (waiting,
    attempt given back) or what the rival made of it."""
    for round_ in range(10):
        lease = await _leased(database, clock)
        shard = lease.shard
        now = clock.now() + timedelta(seconds=31) if rival == "reap" else clock.now()

        mine, theirs = await asyncio.gather(
            _reported(database, lease, snooze(lease, 5), now), _racing(database, lease, now, rival)
        )
        async with database.connection(shard) as conn:
            records = await conn.fetch(
                "SELECT outcome FROM run_attempts WHERE run_id = $1", lease.id
            )
            state = await conn.fetchval("SELECT state FROM runs WHERE id = $1", lease.id)
            row = await conn.fetchrow(
                "SELECT attempt, snoozes FROM live_runs WHERE id = $1", lease.id
            )
        outcomes = [r["outcome"] for r in records]
        assert len(outcomes) == 1, (round_, outcomes)
        if outcomes == ["snoozed"]:
            assert state == "retry_wait" and row is not None
            assert (row["attempt"], row["snoozes"]) == (0, 1)
            assert isinstance(mine, Completed) and mine.snoozed
        elif rival == "reap":
            assert outcomes == ["lease-expired"] and isinstance(mine, StaleLease)
        else:
            # The success won: the snooze of the same token answers what it did.
            assert rival == "complete-succeeded" and outcomes == ["succeeded"]
            assert state == "succeeded"
            assert isinstance(mine, Completed) and mine.state is State.succeeded
        if rival == "heartbeat":
            assert outcomes == ["snoozed"]  # a heartbeat never ends a lease
        if rival == "snooze":
            assert mine == theirs  # the loser answers what the winner did
        async with database.connection(shard) as conn:
            await conn.execute("DELETE FROM live_runs")
