"""The enqueue path: a single enqueue and a plain batch are one statement each (the
definition read, the run inserted, the audit entry, the changed-jobs mark and the
wake-up in it), and runs take their fields from the stored spec. That the batch's checks
of its payloads agree with the checks of the ``Payload`` type needs no database:
tests/unit/test_enqueue_path.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from tickwork.core.clock import FrozenClock
from tickwork.core.errors import IdempotencyKeyReused, NotFound
from tickwork.core.records import State
from tickwork.core.settings import PoolSettings
from tickwork.core.shards import ShardMap
from tickwork.core.spec import JobSpec, Priority, Retry
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.store import database as store_database
from tickwork.store import quotas
from tickwork.store.database import Database
from tickwork.store.wakeup import CHANNEL

TENANT = "acme"


@pytest.fixture
async def one_connection(shard_map: ShardMap) -> AsyncIterator[Database]:
    """Pools of one connection each, so that a test sees every statement of a call."""
    async with Database(shard_map, PoolSettings(min_size=0, max_size=1)) as db:
        yield db


async def statements(
    db: Database, shard: int, work: Callable[[], Awaitable[Any]]
) -> tuple[Any, list[str]]:
    """What ``work`` returns, and the statements it sent to ``shard`` (without the
    pool's reset of a released connection), once a first call has prepared them (and
    had the driver look up their parameters' types)."""
    await work()
    seen: list[str] = []

    def log(record: asyncpg.connection.LoggedQuery) -> None:
        seen.append(record.query)

    async with db.connection(shard) as conn:
        conn.add_query_logger(log)
    try:
        result = await work()
    finally:
        async with db.connection(shard) as conn:
            conn.remove_query_logger(log)
    return result, [q for q in seen if "pg_advisory_unlock_all" not in q]


async def listen(shard_map: ShardMap, shard: int) -> tuple[asyncpg.Connection, asyncio.Queue[str]]:
    conn = await store_database.connect(shard_map[shard])
    heard: asyncio.Queue[str] = asyncio.Queue()
    await conn.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[-1]))
    return conn, heard


async def test_a_single_enqueue_is_one_statement(
    one_connection: Database, shard_map: ShardMap, clock: FrozenClock
) -> None:
    jobs = Jobs(one_connection, clock)
    await jobs.put(TENANT, "report", JobSpec(queue="reports", payload={"d": 1}), "alice")
    shard = jobs.shard_of(TENANT, "report")
    listener, heard = await listen(shard_map, shard)
    try:
        (run, created), sent = await statements(
            one_connection,
            shard,
            lambda: jobs.enqueue(TENANT, "report", EnqueueRequest(), "alice"),
        )
        assert len(sent) == 1, sent
        assert created and run.state is State.ready and run.payload_json == '{"d": 1}'
        assert run.created_at == clock.now()
        # The wake-up rode along: long-polling workers of the queue hear of each run.
        schema = shard_map[shard].schema
        for _ in range(2):
            assert await asyncio.wait_for(heard.get(), 5) == f"{schema} reports"
    finally:
        await listener.close()
    async with one_connection.connection(shard) as conn:
        audit = await conn.fetch("SELECT run_id, action, actor FROM audit_log WHERE job = 'report'")
        changed = await conn.fetchval("SELECT count(*) FROM changed_jobs WHERE job = 'report'")
    enqueued = [(r["run_id"], r["actor"]) for r in audit if r["action"] == "enqueue"]
    assert len(enqueued) == 2 and enqueued[-1] == (run.id, "alice")
    assert changed == 1


async def test_a_plain_batch_is_one_statement_with_one_audit_entry(
    one_connection: Database, shard_map: ShardMap, clock: FrozenClock
) -> None:
    jobs = Jobs(one_connection, clock)
    await jobs.put(TENANT, "fan", JobSpec(queue="fan", payload={"d": 1}), "alice")
    shard = jobs.shard_of(TENANT, "fan")
    listener, heard = await listen(shard_map, shard)
    try:
        ready, sent = await statements(
            one_connection,
            shard,
            lambda: jobs.enqueue_ready(TENANT, "fan", [b'{"n":1}', None, b"null"], "bob"),
        )
        assert len(sent) == 1, sent
        for _ in range(2):
            assert await asyncio.wait_for(heard.get(), 5) == f"{shard_map[shard].schema} fan"
    finally:
        await listener.close()
    assert ready.payloads_json == [b'{"n":1}', b'{"d": 1}', None]
    async with one_connection.connection(shard) as conn:
        stored = await conn.fetch(
            "SELECT id, payload FROM live_runs WHERE job = 'fan' ORDER BY id DESC LIMIT 3"
        )
        audit = await conn.fetch("SELECT action, actor, detail FROM audit_log WHERE job = 'fan'")
    assert [r["id"] for r in stored][::-1] == ready.ids
    assert [r["payload"] for r in stored][::-1] == ['{"n": 1}', '{"d": 1}', None]
    # One entry per call, not per run.
    assert [tuple(r) for r in audit if r["action"] == "enqueue"] == [
        ("enqueue", "bob", '{"runs": 3}')
    ] * 2


async def test_a_plain_batch_of_no_such_job_is_not_found(database: Database) -> None:
    with pytest.raises(NotFound) as found:
        await Jobs(database).enqueue_ready(TENANT, "nothing", [None], "alice")
    assert found.value.field == "name"


async def _run_row(db: Database, jobs: Jobs, name: str, run_id: int) -> asyncpg.Record:
    async with db.connection(jobs.shard_of(TENANT, name)) as conn:
        row = await conn.fetchrow("SELECT * FROM live_runs WHERE id = $1", run_id)
    assert row is not None
    return row


def _fields(row: asyncpg.Record) -> tuple[Any, ...]:
    return (
        row["queue"],
        row["priority"],
        row["max_attempts"],
        row["retry_base"],
        row["retry_max"],
        row["timeout_seconds"],
        row["concurrency"],
        row["dry_run"],
        row["payload"],
    )


async def test_runs_take_the_fields_of_the_stored_spec(database: Database) -> None:
    jobs = Jobs(database)
    spec = JobSpec.model_validate(
        {
            "queue": "q1",
            "priority": "bulk",
            "timeoutSeconds": 10,
            "retry": {"maxAttempts": 5, "baseSeconds": 2, "maxSeconds": 60},
            "concurrency": 3,
            "dryRun": True,
            "payload": {"x": [1]},
        }
    )
    await jobs.put(TENANT, "shaped", spec, "alice")
    single, _ = await jobs.enqueue(TENANT, "shaped", EnqueueRequest(), "alice")
    batch = await jobs.enqueue_ready(TENANT, "shaped", [None], "alice")
    expected = ("q1", 2, 5, 2.0, 60.0, 10, 3, True, '{"x": [1]}')
    assert _fields(await _run_row(database, jobs, "shaped", single.id)) == expected
    assert _fields(await _run_row(database, jobs, "shaped", batch.ids[0])) == expected
    assert (batch.queue, batch.priority, batch.max_attempts) == ("q1", 2, 5)


async def test_runs_of_an_older_spec_document_take_the_spec_defaults(database: Database) -> None:
    """A definition stored before a field existed lacks it: the run gets the default
    JobSpec gives that field, as it would had the definition been read in Python."""
    jobs = Jobs(database)
    await jobs.put(TENANT, "old", JobSpec(queue="q2"), "alice")
    async with database.connection(jobs.shard_of(TENANT, "old")) as conn:
        await conn.execute(
            "UPDATE definitions SET spec = jsonb_build_object('queue', 'q2') WHERE name = 'old'"
        )
    defaults = JobSpec(queue="q2")
    assert defaults.retry == Retry()
    expected = (
        "q2",
        defaults.priority.rank,
        defaults.retry.max_attempts,
        defaults.retry.base_seconds,
        defaults.retry.max_seconds,
        defaults.timeout_seconds,
        defaults.concurrency,
        defaults.dry_run,
        None,
    )
    single, _ = await jobs.enqueue(TENANT, "old", EnqueueRequest(), "alice")
    batch = await jobs.enqueue_ready(TENANT, "old", [None], "alice")
    assert _fields(await _run_row(database, jobs, "old", single.id)) == expected
    assert _fields(await _run_row(database, jobs, "old", batch.ids[0])) == expected


async def test_a_single_enqueue_takes_its_times_priority_and_key(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "timed", JobSpec(queue="q3", payload={"d": 1}), "alice")
    now = clock.now()
    delayed, _ = await jobs.enqueue(
        TENANT, "timed", EnqueueRequest(delay_seconds=90.5, priority=Priority.critical), "a"
    )
    assert (delayed.state, delayed.ready_at, delayed.priority) == (
        State.scheduled,
        now + timedelta(seconds=90.5),
        Priority.critical.rank,
    )
    past, _ = await jobs.enqueue(TENANT, "timed", EnqueueRequest(run_at=now - timedelta(1)), "a")
    assert (past.state, past.ready_at, past.due_at) == (State.ready, now, now)
    given = EnqueueRequest(payload=None, payload_given=True, idempotency_key="k")
    first, created = await jobs.enqueue(TENANT, "timed", given, "a")
    assert created and first.payload_json is None and first.idempotency_key == "k"
    again, created = await jobs.enqueue(TENANT, "timed", given, "a")
    assert (again.run_id, created) == (first.run_id, False)
    with pytest.raises(IdempotencyKeyReused):
        await jobs.enqueue(TENANT, "timed", EnqueueRequest(idempotency_key="k"), "a")


async def test_a_known_key_of_a_deleted_job_is_not_found(database: Database) -> None:
    """Nothing inserted for a key: the job is asked for first, so a deleted job's key
    does not answer its old run."""
    jobs = Jobs(database)
    await jobs.put(TENANT, "gone", JobSpec(queue="q4"), "alice")
    await jobs.enqueue(TENANT, "gone", EnqueueRequest(idempotency_key="k"), "alice")
    await jobs.delete(TENANT, "gone", "alice")
    with pytest.raises(NotFound):
        await jobs.enqueue(TENANT, "gone", EnqueueRequest(idempotency_key="k"), "alice")
    with pytest.raises(NotFound):
        await jobs.enqueue(TENANT, "never", EnqueueRequest(), "alice")


async def test_a_quota_take_is_one_statement_that_relaxes_only_its_own_commit(
    database_url: str, shard_map: ShardMap
) -> None:
    conn = await store_database.connect(shard_map[0])
    seen: list[str] = []
    try:
        await conn.execute("SET synchronous_commit TO on")  # the test server's is off
        conn.add_query_logger(lambda record: seen.append(record.query))
        take = await quotas.take_enqueue_tokens(conn, TENANT, 5, 100.0, 1000.0, ahead=50.0)
        assert (take.admitted, take.taken) == (True, 50.0)
        # The setting was the take's own: the session's next transaction waits again.
        assert await conn.fetchval("SHOW synchronous_commit") == "on"
        await asyncio.sleep(0)  # the driver calls its query loggers soon after a query
        assert len(seen) == 2 and "enqueue_buckets" in seen[0], seen
        async with conn.transaction():
            with pytest.raises(RuntimeError):
                await quotas.take_enqueue_tokens(conn, TENANT, 5, 100.0, 1000.0)
    finally:
        await conn.close()
