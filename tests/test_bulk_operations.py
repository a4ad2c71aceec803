"""Bulk operations in the engine: filters, the scheduler's batches, cancel, an operation
interrupted and taken over by another scheduler, fencing, the audit entry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from bulk_seeding import OTHER, T1, T2, TENANT, seed_dead, seed_scheduled, states

from tickwork.coordination.ownership import Fixed
from tickwork.core.clock import FrozenClock
from tickwork.core.errors import InvalidRequest
from tickwork.core.operations import Action, Filter, OperationState, checked
from tickwork.core.records import Outcome, State
from tickwork.core.settings import SchedulerSettings
from tickwork.engine import operations
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.engine.jobs import Jobs
from tickwork.engine.operations import Operation, Operations
from tickwork.engine.scheduler import Scheduler
from tickwork.store import epochs
from tickwork.store import operations as store
from tickwork.store.database import Database


async def audit_actions(database: Database, tenant: str) -> list[tuple[str, str, object]]:
    found = []
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            for row in await conn.fetch(
                "SELECT action, job, detail FROM audit_log WHERE tenant = $1", tenant
            ):
                found.append((row["action"], row["job"], row["detail"]))
    return found


async def run_to_end(scheduler: Scheduler, ops: Operations, operation_id: str) -> None:
    for _ in range(100):
        await scheduler.pass_once()
        if (await ops.get(TENANT, operation_id)).state is not OperationState.running:
            return
    raise AssertionError("the operation did not finish")


@pytest.fixture
async def seeded(database: Database) -> Database:
    await seed_dead(database, TENANT, "export-a", 10, T1, "Timeout talking to DB", 3)
    await seed_dead(database, TENANT, "export-b", 5, T2, "boom", 1)
    await seed_dead(database, TENANT, "import-x", 7, T1, "a timeout", 5)
    await seed_dead(database, OTHER, "export-a", 4, T1, "Timeout talking to DB", 3)
    return database


@pytest.fixture
def ops(seeded: Database, clock: FrozenClock) -> Operations:
    """Bulk operations over the seeded runs."""
    return Operations(seeded, clock)


@pytest.fixture
async def replay(ops: Operations) -> Operation:
    """A bulk replay of every seeded dead run, made and not worked on yet."""
    return await ops.create(TENANT, Action.replay, checked(action=Action.replay), "alice")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, 22),
        ({"job": "export-a"}, 10),
        ({"job_pattern": "export-*"}, 15),
        ({"job_pattern": "export-?"}, 15),
        ({"job_pattern": "*-x"}, 7),
        ({"job_pattern": "export"}, 0),
        ({"from_": T2}, 5),
        ({"to": T2}, 17),
        ({"from_": T1, "to": T1 + timedelta(seconds=1)}, 17),
        ({"error_contains": "TIMEOUT"}, 17),
        ({"error_contains": "talking to db"}, 10),
        ({"min_attempts": 3}, 17),
        ({"max_attempts": 3}, 15),
        ({"min_attempts": 2, "max_attempts": 4, "job_pattern": "*"}, 10),
    ],
)
async def test_each_filter_field_counts_the_runs_it_names(
    seeded: Database, clock: FrozenClock, fields: dict[str, object], expected: int
) -> None:
    found = checked(action=Action.replay, **fields)  # type: ignore[arg-type]
    assert await Operations(seeded, clock).count(TENANT, Action.replay, found) == expected


def test_bad_filters_are_refused_naming_the_field() -> None:
    cases: list[tuple[dict[str, object], str]] = [
        ({"job": "Not A Name"}, "filter.job"),
        ({"job": "a", "job_pattern": "a*"}, "filter.jobPattern"),
        ({"job_pattern": "export-%"}, "filter.jobPattern"),
        ({"state": "ready"}, "filter.state"),
        ({"state": "nonsense"}, "filter.state"),
        ({"from_": T2, "to": T1}, "filter.to"),
        ({"error_contains": ""}, "filter.errorContains"),
        ({"min_attempts": -1}, "filter.minAttempts"),
        ({"min_attempts": 3, "max_attempts": 2}, "filter.maxAttempts"),
    ]
    for fields, field in cases:
        with pytest.raises(InvalidRequest) as refused:
            checked(action=Action.replay, prefix="filter.", **fields)  # type: ignore[arg-type]
        assert refused.value.field == field, fields
    with pytest.raises(InvalidRequest) as cancel:
        checked(action=Action.cancel, state="dead", prefix="filter.")
    assert cancel.value.field == "filter.state"


def test_a_glob_is_escaped_for_like() -> None:
    assert Filter(job_pattern="a.b-*").like == "a.b-%"
    assert Filter(job_pattern="x?y").like == "x_y"
    assert Filter(job_pattern="a_%\\*").like == "a\\_\\%\\\\%"


async def test_a_bulk_replay_replays_every_match_once_and_is_audited_once(
    seeded: Database, clock: FrozenClock, ops: Operations
) -> None:
    made = await ops.create(TENANT, Action.replay, checked(action=Action.replay), "alice")
    assert (made.state, made.total, made.processed, made.percent) == (
        OperationState.running,
        22,
        0,
        0,
    )
    assert len(made.shards) == seeded.shard_count and made.id.startswith("op-")

    await run_to_end(
        Scheduler(seeded, SchedulerSettings(operations_batch=4), clock=clock), ops, made.id
    )

    done = await ops.get(TENANT, made.id)
    assert (done.state, done.total, done.processed, done.percent) == (
        OperationState.done,
        22,
        22,
        100,
    )
    assert done.finished_at is not None
    assert await states(seeded, TENANT) == {"ready": 22}
    assert await states(seeded, OTHER) == {"dead": 4}  # another tenant's runs untouched
    [(action, job, detail)] = await audit_actions(seeded, TENANT)
    assert (action, job) == ("bulk-replay", "*")
    assert '"total": 22' in str(detail) and made.id in str(detail)
    assert [op.id for op in await ops.recent(TENANT, 10)] == [made.id]
    assert await ops.recent(OTHER, 10) == []


async def test_a_bulk_discard_and_one_with_nothing_to_do(
    seeded: Database, clock: FrozenClock, ops: Operations
) -> None:
    found = checked(action=Action.discard, job="export-b")
    made = await ops.create(TENANT, Action.discard, found, "alice")
    await run_to_end(Scheduler(seeded, clock=clock), ops, made.id)
    assert await states(seeded, TENANT) == {"dead": 17, "discarded": 5}
    [(action, job, _)] = await audit_actions(seeded, TENANT)
    assert (action, job) == ("bulk-discard", "export-b")

    empty = await ops.create(TENANT, Action.discard, found, "alice")
    assert (empty.state, empty.total, empty.percent) == (OperationState.done, 0, 100)


async def test_runs_dead_after_the_operation_was_made_are_left(
    seeded: Database, clock: FrozenClock, ops: Operations
) -> None:
    clock.set(T2 + timedelta(hours=1))
    made = await ops.create(TENANT, Action.replay, checked(action=Action.replay), "alice")
    await seed_dead(seeded, TENANT, "export-a", 3, T2 + timedelta(hours=2))
    await run_to_end(Scheduler(seeded, clock=clock), ops, made.id)
    assert await states(seeded, TENANT) == {"ready": 22, "dead": 3}


async def test_cancelling_stops_it_and_keeps_what_was_done(
    seeded: Database, clock: FrozenClock, ops: Operations
) -> None:
    found = checked(action=Action.replay, job="export-a")
    made = await ops.create(TENANT, Action.replay, found, "alice")
    shard = seeded.shard_map.shard_of(TENANT, "export-a")
    async with seeded.connection(shard) as conn:
        batch = await store.work_batch(conn, made.id, 4, clock.now())
    assert (batch.acted, batch.finished) == (4, False)
    assert (await ops.get(TENANT, made.id)).percent == 40

    stopped = await ops.cancel(TENANT, made.id)
    await Scheduler(seeded, clock=clock).pass_once()

    assert (stopped.state, stopped.processed) == (OperationState.cancelled, 4)
    assert (await ops.get(TENANT, made.id)).processed == 4
    assert await states(seeded, TENANT) == {"ready": 4, "dead": 18}
    assert (await ops.cancel(TENANT, made.id)).state is OperationState.cancelled


async def test_an_interrupted_operation_resumes_on_the_next_owner_exactly_once(
    database: Database, clock: FrozenClock
) -> None:
    """A scheduler dies between two batches; another takes the shard over. Runs the
    first one replayed, which died again since, are not replayed a second time."""
    shard = await seed_dead(database, TENANT, "export-a", 30, T1)
    ops = Operations(database, clock)
    made = await ops.create(TENANT, Action.replay, checked(action=Action.replay), "alice")
    batches = 0

    def die_after_two(_shard: int, step: str) -> None:
        nonlocal batches
        if step == "operations":
            batches += 1
            if batches > 3:  # the step's own guard, then two batches
                raise RuntimeError("killed")

    first = Scheduler(
        database,
        SchedulerSettings(operations_batch=5),
        ownership=Fixed([shard], "first"),
        clock=clock,
        before_write=die_after_two,
    )
    await first.pass_once()
    assert first.failing() == [shard]
    assert (await ops.get(TENANT, made.id)).processed == 10
    # Two of the runs replayed die again before the operation resumes.
    dispatcher = Dispatcher(database, clock)
    leases = await dispatcher.lease(
        ["default"], limit=2, worker_id="w", lease_seconds=60, tenant=TENANT
    )
    failed = [CompleteItem(lease.run_id, lease.fencing_token, Outcome.failed) for lease in leases]
    assert not any(isinstance(r, Exception) for r in await dispatcher.complete(failed))
    assert await states(database, TENANT) == {"ready": 8, "dead": 22}

    second = Scheduler(
        database,
        SchedulerSettings(operations_batch=5),
        ownership=Fixed([shard], "second"),
        clock=clock,
    )
    await run_to_end(second, ops, made.id)

    done = await ops.get(TENANT, made.id)
    assert (done.state, done.total, done.processed) == (OperationState.done, 30, 30)
    assert await states(database, TENANT) == {"ready": 28, "dead": 2}
    for lease in leases:
        run, _ = await Jobs(database, clock).run(lease.run_id)
        assert run.state is State.dead


async def test_a_deposed_schedulers_batch_is_refused(
    seeded: Database, clock: FrozenClock, ops: Operations, replay: Operation
) -> None:
    shard = seeded.shard_map.shard_of(TENANT, "export-a")
    async with seeded.connection(shard) as conn:
        old = await epochs.take(conn, "old", clock.now())
        await epochs.take(conn, "new", clock.now())
        with pytest.raises(epochs.Deposed):
            await store.work_batch(conn, replay.id, 5, clock.now(), fence=epochs.Fence(old.epoch))
    assert (await ops.get(TENANT, replay.id)).processed == 0
    assert await states(seeded, TENANT) == {"dead": 22}


async def test_a_bulk_cancel_cancels_pending_asks_leased_and_leaves_later_runs(
    database: Database, clock: FrozenClock
) -> None:
    before = clock.now() - timedelta(minutes=5)
    await seed_scheduled(database, TENANT, "export-a", 6, clock.now() + timedelta(hours=1), before)
    await seed_scheduled(database, TENANT, "import-x", 3, clock.now() + timedelta(hours=1), before)
    await seed_scheduled(database, OTHER, "export-a", 2, clock.now() + timedelta(hours=1), before)
    shard = database.shard_map.shard_of(TENANT, "export-a")
    async with database.connection(shard) as conn:
        await conn.execute(
            "UPDATE live_runs SET state = 'ready' WHERE id = (SELECT min(id) FROM live_runs"
            " WHERE tenant = $1 AND job = 'export-a')",
            TENANT,
        )
    [held] = await Dispatcher(database, clock).lease(
        ["default"], limit=1, worker_id="w", lease_seconds=60, tenant=TENANT
    )
    ops = Operations(database, clock)
    found = checked(action=Action.cancel, job_pattern="export-*")
    assert await ops.count(TENANT, Action.cancel, found) == 6
    made = await ops.create(TENANT, Action.cancel, found, "alice")
    clock.advance(1)
    await seed_scheduled(
        database, TENANT, "export-a", 2, clock.now() + timedelta(hours=1), clock.now()
    )

    await run_to_end(Scheduler(database, clock=clock), ops, made.id)

    assert (await ops.get(TENANT, made.id)).processed == 6
    assert await states(database, TENANT) == {"cancelled": 5, "leased": 1, "scheduled": 5}
    assert await states(database, OTHER) == {"scheduled": 2}
    async with database.connection(shard) as conn:
        asked = await conn.fetchval(
            "SELECT cancel_requested FROM live_runs WHERE id = $1",
            int(held.run_id.split("-")[1]),
        )
    assert asked is True


async def test_runs_by_state_across_jobs_page_by_page(ops: Operations) -> None:
    found = checked(state="dead", job_pattern="export-*")
    seen: list[str] = []
    cursor = None
    while True:
        page, cursor = await ops.runs(TENANT, found, cursor, 4)
        seen += [run.run_id for run in page]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 15
    first, _ = await ops.runs(TENANT, found, None, 100)
    assert [run.finished_at for run in first][:5] == [T2] * 5  # newest death first


async def test_the_work_step_stops_at_its_budget(
    seeded: Database, clock: FrozenClock, ops: Operations, replay: Operation
) -> None:
    shard = seeded.shard_map.shard_of(TENANT, "export-a")
    async with seeded.connection(shard) as conn:
        worked = await operations.work(conn, clock.now(), batch=1, budget_seconds=0)
    assert (worked.acted, worked.more) == (0, True)
    assert (await ops.get(TENANT, replay.id)).processed == 0
