"""Auto-pause: ``pauseAfterFailures: N`` pauses a job after N consecutive dead runs, in
the transaction that ends the last of them, whichever path made them dead (a failure
out of attempts, a failure not retryable, the reaper). A succeeded run starts the count
again; a resume or a changed spec ends the pause; the same spec applied again does not.
The race: dead runs completing at once on their own connections pause the job once and
count exactly."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import orjson
import pytest

from tickwork.core.clock import FrozenClock
from tickwork.core.errors import ManagedByKubernetes
from tickwork.core.records import Completion, Lease, Manager, Outcome, State
from tickwork.core.spec import JobSpec, Retry
from tickwork.engine.jobs import Change, EnqueueRequest, Jobs
from tickwork.store import leases, sweeps
from tickwork.store.database import Database

TENANT = "acme"
JOB = "poison"
ACTOR = "test"


def poison(pause_after: int | None = 3, max_attempts: int = 1) -> JobSpec:
    return JobSpec(pause_after_failures=pause_after, retry=Retry(max_attempts=max_attempts))


async def _lease(jobs: Jobs, clock: FrozenClock, count: int = 1) -> list[Lease]:
    for _ in range(count):
        await jobs.enqueue(TENANT, JOB, EnqueueRequest(), ACTOR)
    shard = jobs.shard_of(TENANT, JOB)
    async with jobs.database.connection(shard) as conn:
        return await leases.claim(conn, shard, ["default"], count, "w", 30, clock.now())


async def _finish(jobs: Jobs, lease: Lease, outcome: Outcome, message: str = "boom") -> State:
    completion = Completion(lease.id, lease.fencing_token, outcome, {"message": message})
    async with jobs.database.connection(lease.shard) as conn:
        [answer] = await leases.complete(conn, lease.shard, [completion])
    return answer.state  # type: ignore[union-attr]


async def _audit(jobs: Jobs) -> list[tuple[str, object]]:
    shard = jobs.shard_of(TENANT, JOB)
    async with jobs.database.connection(shard) as conn:
        rows = await conn.fetch(
            "SELECT action, detail FROM audit_log WHERE job = $1 ORDER BY id", JOB
        )
    return [(r["action"], None if r["detail"] is None else orjson.loads(r["detail"])) for r in rows]


async def test_the_nth_consecutive_dead_run_pauses_the_job_with_its_reason(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, JOB, poison(3), ACTOR)
    for n in range(1, 3):
        [lease] = await _lease(jobs, clock)
        assert await _finish(jobs, lease, Outcome.failed, f"boom {n}") is State.dead
        view = await jobs.get(TENANT, JOB)
        assert not view.definition.paused and view.definition.consecutive_dead == n
    [lease] = await _lease(jobs, clock)
    await _finish(jobs, lease, Outcome.failed, "boom 3")
    definition = (await jobs.get(TENANT, JOB)).definition
    assert definition.paused and definition.auto_paused
    assert not definition.spec.paused  # a state beside the spec, not an edit of it
    reason = definition.paused_reason
    assert reason is not None and reason.consecutive_dead == 3 and reason.run_id == lease.id
    assert reason.error["message"] == "boom 3"
    assert "3 consecutive dead runs" in reason.message(definition.shard)
    assert "boom 3" in reason.message(definition.shard)
    assert [a for a, _ in await _audit(jobs)].count("auto-pause") == 1
    action, detail = (await _audit(jobs))[-1]
    assert action == "auto-pause"
    assert detail == {
        "consecutiveDead": 3,
        "pauseAfterFailures": 3,
        "error": {"message": "boom 3", "retryable": True, "attempt": 1},
    }
    # A run already created still runs and dies: counted, the job is not paused again.
    [lease] = await _lease(jobs, clock)
    await _finish(jobs, lease, Outcome.failed)
    definition = (await jobs.get(TENANT, JOB)).definition
    assert definition.consecutive_dead == 4 and definition.paused_reason == reason
    assert [a for a, _ in await _audit(jobs)].count("auto-pause") == 1


async def test_a_succeeded_run_starts_the_count_again(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, JOB, poison(2), ACTOR)
    [lease] = await _lease(jobs, clock)
    await _finish(jobs, lease, Outcome.failed)
    [lease] = await _lease(jobs, clock)
    assert await _finish(jobs, lease, Outcome.succeeded) is State.succeeded
    assert (await jobs.get(TENANT, JOB)).definition.consecutive_dead == 0
    [lease] = await _lease(jobs, clock)
    await _finish(jobs, lease, Outcome.failed)
    assert not (await jobs.get(TENANT, JOB)).definition.paused  # 1 of 2, not 2


async def test_retried_failures_do_not_count_only_dead_runs_do(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, JOB, poison(1, max_attempts=2), ACTOR)
    [lease] = await _lease(jobs, clock)
    assert await _finish(jobs, lease, Outcome.failed) is State.retry_wait
    assert not (await jobs.get(TENANT, JOB)).definition.paused


async def test_the_reaper_making_the_last_run_dead_pauses_the_job(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, JOB, poison(2), ACTOR)
    await _lease(jobs, clock, 2)
    shard = jobs.shard_of(TENANT, JOB)
    async with database.connection(shard) as conn:
        reaped = await sweeps.reap(conn, now=clock.now() + timedelta(seconds=31))
    assert reaped.dead == 2
    definition = (await jobs.get(TENANT, JOB)).definition
    assert definition.auto_paused and definition.consecutive_dead == 2
    assert definition.paused_reason is not None
    assert definition.paused_reason.error["reason"] == "lease-expired"


async def test_a_job_without_the_field_is_counted_but_never_paused(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, JOB, poison(None), ACTOR)
    for _ in range(3):
        [lease] = await _lease(jobs, clock)
        await _finish(jobs, lease, Outcome.failed)
    definition = (await jobs.get(TENANT, JOB)).definition
    assert not definition.paused and definition.consecutive_dead == 3


async def _auto_paused(jobs: Jobs, clock: FrozenClock, manager: Manager | None = None) -> None:
    await jobs.put(TENANT, JOB, poison(1), ACTOR, manager=manager)
    [lease] = await _lease(jobs, clock)
    await _finish(jobs, lease, Outcome.failed)
    assert (await jobs.get(TENANT, JOB)).definition.auto_paused


async def test_a_resume_ends_the_pause_and_the_count(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await _auto_paused(jobs, clock)
    resumed = await jobs.set_paused(TENANT, JOB, False, ACTOR)
    assert not resumed.paused and resumed.paused_reason is None
    assert resumed.consecutive_dead == 0
    assert (await _audit(jobs))[-1][0] == "resume"


async def test_the_same_declaration_applied_again_keeps_the_pause_a_changed_one_ends_it(
    database: Database, clock: FrozenClock
) -> None:
    """GitOps: the operator or tickwork dev applies the ScheduledJob again (a resync,
    a restart): the job stays paused. An edit of the spec is a deliberate act on the job
    (a fix): it ends the pause."""
    jobs = Jobs(database, clock)
    await _auto_paused(jobs, clock, Manager.kubernetes)
    again = await jobs.put(TENANT, JOB, poison(1), ACTOR, manager=Manager.kubernetes)
    assert again.change is Change.unchanged and again.definition.auto_paused
    changed = await jobs.put(TENANT, JOB, poison(2), ACTOR, manager=Manager.kubernetes)
    assert changed.change is Change.updated
    assert not changed.definition.paused and changed.definition.paused_reason is None
    assert changed.definition.consecutive_dead == 0


async def test_a_managed_job_tickwork_paused_may_be_resumed_through_the_api(
    database: Database, clock: FrozenClock
) -> None:
    """The resume agrees with the declaration (paused: false); pausing it, or resuming a
    job its declaration pauses, stays refused."""
    jobs = Jobs(database, clock)
    await _auto_paused(jobs, clock, Manager.kubernetes)
    with pytest.raises(ManagedByKubernetes):
        await jobs.set_paused(TENANT, JOB, True, ACTOR)
    resumed = await jobs.set_paused(TENANT, JOB, False, ACTOR)
    assert not resumed.paused and not resumed.spec.paused
    with pytest.raises(ManagedByKubernetes):
        await jobs.set_paused(TENANT, JOB, False, ACTOR)  # not auto-paused any more


async def _fail_after(start: asyncio.Event, jobs: Jobs, lease: Lease) -> State:
    await start.wait()
    return await _finish(jobs, lease, Outcome.failed)


async def test_dead_runs_completing_at_once_pause_the_job_once_and_count_exactly(
    database: Database, clock: FrozenClock
) -> None:
    """12 runs leased, 12 failures out of attempts on 12 connections at once, a limit of
    5: whatever the interleaving, the count is 12, one transaction pauses the job and one
    audit entry says so."""
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, JOB, poison(5), ACTOR)
    for _ in range(3):  # three rounds, each from a resumed job
        leased = await _lease(jobs, clock, 12)
        assert len(leased) == 12
        start = asyncio.Event()
        tasks = [asyncio.create_task(_fail_after(start, jobs, lease)) for lease in leased]
        start.set()
        assert set(await asyncio.gather(*tasks)) == {State.dead}
        definition = (await jobs.get(TENANT, JOB)).definition
        assert definition.consecutive_dead == 12
        assert definition.auto_paused and definition.paused_reason is not None
        assert 5 <= definition.paused_reason.consecutive_dead <= 12
        audit = [a for a, _ in await _audit(jobs)]
        assert audit.count("auto-pause") == 1
        await jobs.set_paused(TENANT, JOB, False, ACTOR)
        shard = jobs.shard_of(TENANT, JOB)
        async with database.connection(shard) as conn:
            await conn.execute("DELETE FROM audit_log WHERE job = $1", JOB)
