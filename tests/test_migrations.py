"""Shard migrations: from zero, upgrades, re-runs, mis-wired shards, and the SQL they serve.

Every named query must prepare against the migrated schema, and the hot loops must use
the partial index written for them (a sequential scan over millions of finished runs
would pass every functional test and still take a shard down).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from conftest import TEMPLATE, TEST_SHARDS, scratch_database
from pg_server import unpreparable

from tickwork.core.errors import SchemaMismatch
from tickwork.core.shards import Shard, ShardMap
from tickwork.store import catalog, database, migrate, queries


@pytest.fixture
async def empty_url(server_url: str) -> AsyncIterator[str]:
    """A brand-new database with nothing in it."""
    async with scratch_database(server_url, "tickwork_empty") as url:
        yield url


def shards_of(url: str, count: int = TEST_SHARDS) -> tuple[Shard, ...]:
    return ShardMap.from_dsns([url], count).shards


async def describe(shard: Shard) -> str:
    """The shard's schema as ``store/schema.sql`` writes it (no shard name in it)."""
    conn = await database.connect(shard)
    try:
        return await catalog.describe(conn)
    finally:
        await conn.close()


OUT_OF_DATE = "the migrations and store/schema.sql disagree: run `make schema`, review the diff"
TABLE = re.compile(r"^CREATE TABLE (\w+) ", re.MULTILINE)
VIEW = re.compile(r"^CREATE VIEW (\w+) ", re.MULTILINE)
INDEX = re.compile(r"^CREATE (?:UNIQUE )?INDEX (\w+) ", re.MULTILINE)
MIGRATION = re.compile(r"^-- migration (\d{4})_(\w+)$", re.MULTILINE)


async def test_migrating_an_empty_database_gives_the_canonical_schema(
    empty_url: str, database_url: str
) -> None:
    applied = await migrate.migrate_all(shards_of(empty_url))
    every_version = [m.version for m in migrate.migrations()]
    assert applied == {n: every_version for n in range(TEST_SHARDS)}

    canonical = catalog.canonical()
    for shard in (*shards_of(empty_url), *shards_of(database_url)):
        assert await describe(shard) == canonical, OUT_OF_DATE

    tables = set(TABLE.findall(canonical))
    assert tables == {
        "attempts",
        "attempts_default",
        "audit_log",
        "changed_jobs",
        "definitions",
        "enqueue_buckets",
        "enqueue_keys",
        "finished_runs",
        "finished_runs_default",
        "live_runs",
        "moved_runs",
        "notification_targets",
        "operations",
        "queue_pauses",
        "rate_windows",
        "reshard_journal",
        "run_keys",
        "scheduler_members",
        "schema_version",
        "shard_epoch",
        "shard_lease",
        "shard_meta",
    }
    assert set(VIEW.findall(canonical)) == {"runs", "run_attempts", "definition_run_fields"}
    index_names = set(INDEX.findall(canonical))
    assert {
        "live_runs_claimable",
        "live_runs_limited",
        "live_runs_waiting",
        "live_runs_leased",
        "run_keys_idempotency",
        "run_keys_cron_due",
        "finished_runs_dead",
        "definitions_due",
        "definitions_managed",
        "attempts_run",
    } <= index_names
    assert MIGRATION.findall(canonical) == [
        (f"{m.version:04d}", m.name) for m in migrate.migrations()
    ]


async def test_a_shard_that_drifted_from_the_canonical_schema_is_told_apart(
    database_url: str,
) -> None:
    """The check sees what a hand-made change or a migration missing from schema.sql
    would leave: here one index more."""
    shard = shards_of(database_url)[1]
    conn = await database.connect(shard)
    try:
        await conn.execute("CREATE INDEX drift_probe ON audit_log (actor)")
    finally:
        await conn.close()
    described = await describe(shard)
    assert described != catalog.canonical()
    assert "CREATE INDEX drift_probe ON audit_log USING btree (actor);" in described
    assert await describe(shards_of(database_url)[0]) == catalog.canonical()


async def test_each_shard_records_its_identity(empty_url: str) -> None:
    await migrate.migrate_all(shards_of(empty_url))
    for shard in shards_of(empty_url):
        conn = await database.connect(shard)
        try:
            row = await conn.fetchrow("SELECT shard, shard_count FROM shard_meta")
            assert row is not None and dict(row) == {"shard": shard.number, "shard_count": 4}
            await migrate.check_shard(conn, shard, TEST_SHARDS)
        finally:
            await conn.close()


async def test_migrating_again_changes_nothing(database_url: str) -> None:
    shards = shards_of(database_url)
    before = [await describe(s) for s in shards]
    conn = await database.connect(shards[0])
    try:
        stamps = await conn.fetch("SELECT version, applied_at FROM schema_version")
        await conn.execute(
            "INSERT INTO audit_log (at, tenant, job, action, actor) "
            "VALUES (now(), 't', 'j', 'probe', 'me')"
        )
    finally:
        await conn.close()

    assert await migrate.migrate_all(shards) == {n: [] for n in range(TEST_SHARDS)}

    assert [await describe(s) for s in shards] == before
    conn = await database.connect(shards[0])
    try:
        assert await conn.fetch("SELECT version, applied_at FROM schema_version") == stamps
        assert await conn.fetchval("SELECT count(*) FROM audit_log") == 1
    finally:
        await conn.close()


async def test_concurrent_migrations_apply_each_version_once(empty_url: str) -> None:
    shards = shards_of(empty_url)
    first, second = await asyncio.gather(migrate.migrate_all(shards), migrate.migrate_all(shards))
    every_version = [m.version for m in migrate.migrations()]
    for n in range(TEST_SHARDS):
        assert sorted(first[n] + second[n]) == every_version
    conn = await database.connect(shards[0])
    try:
        assert await conn.fetchval("SELECT count(*) FROM schema_version") == len(every_version)
    finally:
        await conn.close()


@pytest.fixture
def next_release(monkeypatch: pytest.MonkeyPatch) -> Iterator[migrate.Migration]:
    """Pretend this release ships one more migration than the files on disk."""
    current = migrate.migrations()
    extra = migrate.Migration(
        current[-1].version + 1, "probe", "CREATE TABLE upgrade_probe (id integer);"
    )
    monkeypatch.setattr(migrate, "migrations", lambda: (*current, extra))
    yield extra


async def test_an_upgrade_applies_only_the_new_version(
    database_url: str, next_release: migrate.Migration
) -> None:
    shards = shards_of(database_url)
    assert await migrate.migrate_all(shards) == {
        n: [next_release.version] for n in range(TEST_SHARDS)
    }
    conn = await database.connect(shards[2])
    try:
        assert await conn.fetchval("SELECT count(*) FROM upgrade_probe") == 0
        await migrate.check_shard(conn, shards[2], TEST_SHARDS)
    finally:
        await conn.close()


async def test_upgrading_from_every_older_version_matches_migrating_from_zero(
    empty_url: str, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = migrate.migrations()
    canonical = catalog.canonical()
    # One shard per starting version: shard k starts at version k, then upgrades.
    shards = shards_of(empty_url, len(everything) + 1)
    for start, shard in enumerate(shards):
        if start:
            monkeypatch.setattr(migrate, "migrations", lambda k=start: everything[:k])
            await _migrate_one(shard, len(shards))
        monkeypatch.setattr(migrate, "migrations", lambda: everything)
        await _migrate_one(shard, len(shards))
        assert await describe(shard) == canonical, f"from version {start}"


async def _migrate_one(shard: Shard, count: int) -> list[int]:
    conn = await database.connect(shard)
    try:
        return await migrate.migrate_shard(conn, shard, count)
    finally:
        await conn.close()


async def test_an_unmigrated_shard_is_refused(empty_url: str) -> None:
    shard = shards_of(empty_url)[0]
    conn = await database.connect(shard)
    try:
        with pytest.raises(SchemaMismatch, match=r"version 0.*tickwork migrate"):
            await migrate.check_shard(conn, shard, TEST_SHARDS)
    finally:
        await conn.close()


async def test_a_shard_behind_this_release_is_refused(
    database_url: str, next_release: migrate.Migration
) -> None:
    shard = shards_of(database_url)[1]
    conn = await database.connect(shard)
    try:
        with pytest.raises(SchemaMismatch) as caught:
            await migrate.check_shard(conn, shard, TEST_SHARDS)
    finally:
        await conn.close()
    have, need = next_release.version - 1, next_release.version
    assert f"schema version {have}, this release needs {need}" in str(caught.value)
    assert caught.value.status == 503


async def _swap_schemas(url: str, a: Shard, b: Shard) -> None:
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute(f"ALTER SCHEMA {a.schema} RENAME TO swap_tmp")
            await conn.execute(f"ALTER SCHEMA {b.schema} RENAME TO {a.schema}")
            await conn.execute(f"ALTER SCHEMA swap_tmp RENAME TO {b.schema}")
    finally:
        await conn.close()


async def test_a_schema_holding_another_shard_is_refused(database_url: str) -> None:
    """A DSN list given in the wrong order must not silently mix shards."""
    shards = shards_of(database_url)
    await _swap_schemas(database_url, shards[0], shards[1])
    conn = await database.connect(shards[0])
    try:
        with pytest.raises(SchemaMismatch, match="should hold shard 0 of 4 but holds shard 1 of 4"):
            await migrate.check_shard(conn, shards[0], TEST_SHARDS)
        with pytest.raises(SchemaMismatch, match="holds shard 1 of 4"):
            await migrate.migrate_shard(conn, shards[0], TEST_SHARDS)
        # The refused migration changed nothing: the schema still says shard 1.
        row = await conn.fetchrow("SELECT shard, shard_count FROM shard_meta")
        assert row is not None and tuple(row) == (1, 4)
    finally:
        await conn.close()


async def test_a_shard_of_another_shard_count_is_refused(database_url: str) -> None:
    shard = ShardMap.from_dsns([database_url], 8)[2]
    conn = await database.connect(shard)
    try:
        with pytest.raises(SchemaMismatch, match="should hold shard 2 of 8 but holds shard 2 of 4"):
            await migrate.check_shard(conn, shard, 8)
    finally:
        await conn.close()


async def test_every_named_query_prepares_against_the_schema(database_url: str) -> None:
    named = queries.all_queries()
    assert len(named) >= 30
    assert await unpreparable(shards_of(database_url)[0], named) == {}


def test_query_files_refuse_ambiguity() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        queries.parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "x.sql")
    with pytest.raises(ValueError, match="empty"):
        queries.parse("-- name: a\n\n-- name: b\nSELECT 2\n", "x.sql")
    with pytest.raises(ValueError, match="before the first"):
        queries.parse("SELECT 0;\n-- name: a\nSELECT 1\n", "x.sql")
    assert queries.parse("-- comment\n-- name: a\nSELECT 1\n", "x.sql") == {"a": "SELECT 1"}


# --- EXPLAIN guards ----------------------------------------------------------------------

SEED_LIVE_RUNS = """
INSERT INTO live_runs (tenant, job, queue, priority, state, origin, attempt, max_attempts,
                       retry_base, retry_max, timeout_seconds, due_at, ready_at,
                       start_deadline, fencing_token, lease_expires_at, created_at,
                       updated_at, concurrency)
SELECT 't' || (i % 7), 'job-' || (i % 50), 'default', i % 3, s.state, 'api',
       CASE WHEN s.state = 'ready' THEN 0 ELSE 1 END, 3, 1, 10, 60,
       now() - interval '1 day', now() + (i % 600) * interval '1 second' - interval '5 min',
       CASE WHEN i % 2 = 0 THEN now() + interval '1 hour' END,
       CASE WHEN s.state = 'leased' THEN i END,
       CASE WHEN s.state = 'leased' THEN now() + (i % 60) * interval '1 second' END,
       now(), now(), CASE WHEN i % 50 = 7 THEN 2 ELSE 0 END
FROM generate_series(1, $1) AS i,
LATERAL (SELECT CASE
    WHEN i % 4 = 0 THEN 'ready'
    WHEN i % 4 = 1 THEN 'scheduled'
    WHEN i % 4 = 2 THEN 'retry_wait'
    ELSE 'leased' END AS state) AS s
"""
SEED_FINISHED_RUNS = """
INSERT INTO finished_runs (id, tenant, job, queue, priority, state, origin, attempt,
                           max_attempts, retry_base, retry_max, timeout_seconds, due_at,
                           ready_at, fencing_token, finished_at, created_at, updated_at)
SELECT nextval('run_ids'), 't' || (i % 7), 'job-' || (i % 50), 'default', i % 3,
       CASE WHEN i % 20 = 0 THEN 'dead' ELSE 'succeeded' END, 'api', 1, 3, 1, 10, 60,
       now() - interval '1 day', now() - interval '1 day', i,
       now() - i * interval '1 second', now(), now()
FROM generate_series(1, $1) AS i
"""
SEED_RUN_KEYS = """
INSERT INTO run_keys (tenant, job, due_at, idempotency_key, run_id, created_at)
SELECT tenant, job, due_at + id * interval '1 second', 'key-' || id, id, created_at
FROM runs
"""


LATER = datetime.now(UTC) - timedelta(hours=1)  # a cursor somewhere in the seeded rows

SEED_AUDIT = """
INSERT INTO audit_log (at, tenant, job, run_id, action, actor)
SELECT now() - i * interval '1 second', 't' || (i % 7), 'job-' || (i % 50), i, 'cancel', 'me'
FROM generate_series(1, $1) AS i
"""


def _index_names(plan: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.add(plan["Index Name"])
        found.update(plan.get("Conflict Arbiter Indexes", ()))
        for value in plan.values():
            found |= _index_names(value)
    elif isinstance(plan, list):
        for value in plan:
            found |= _index_names(value)
    return found


@pytest.fixture(scope="module")
async def busy_url(server_url: str, template_url: str) -> AsyncIterator[str]:
    """Shard 0 holding 20 000 live runs and 20 000 finished ones, seeded once for the
    plan guards (each runs its statement in a transaction it rolls back)."""
    async with scratch_database(server_url, "tickwork_busy", TEMPLATE) as url:
        conn = await database.connect(shards_of(url)[0])
        try:
            await conn.execute(SEED_LIVE_RUNS, 20_000)
            await conn.execute(SEED_FINISHED_RUNS, 20_000)
            await conn.execute(SEED_RUN_KEYS)
            await conn.execute(SEED_AUDIT, 20_000)
            await conn.execute("ANALYZE live_runs; ANALYZE finished_runs; ANALYZE run_keys")
            await conn.execute("ANALYZE audit_log")
        finally:
            await conn.close()
        yield url


@pytest.fixture
async def busy_shard(busy_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await database.connect(shards_of(busy_url)[0])
    try:
        yield conn
    finally:
        await conn.close()


DUE = datetime(2026, 3, 15, 2, 0, tzinfo=UTC)
PASSES = [0.0, 0.0, 0.0]
WEIGHTS = [0.7, 0.25, 0.05]


@pytest.mark.parametrize(
    ("query", "args", "indexes"),
    [
        (
            "claim",
            (["default"], 10, "w-1", None, 30.0, None, PASSES, WEIGHTS, 1),
            {"live_runs_claimable", "live_runs_flow"},
        ),
        (
            "claim_limited",
            (["default"], 10, "w-1", None, 30.0, None, PASSES, WEIGHTS, 1, []),
            {"live_runs_claimable", "live_runs_flow"},
        ),
        # The flow buckets of the limited heads: one probe each on their index.
        ("lock_flow", (["default"], None), {"live_runs_flow"}),
        # Several heads in the busy shard: the probe reads both indexes, leases nothing.
        (
            "claim_one_head",
            (["default"], 10, "w-1", None, 30.0, None),
            {"live_runs_claimable", "live_runs_flow"},
        ),
        ("promote_due", (500, None), {"live_runs_waiting"}),
        ("lock_expired", (None, 1000), {"live_runs_leased"}),
        ("skip_past_deadline", (500, None), {"live_runs_start_deadline"}),
        # Overlap policies: the due fires on their own small index, a job's runs on the
        # two indexes by job, the decided runs by primary key.
        ("overlap_due_jobs", (500, None), {"live_runs_overlap_due"}),
        ("lock_overlap_fires", (["t1"], ["job-1"], None), {"live_runs_by_job", "live_runs_leased"}),
        (
            "replace_running",
            (["t1"], ["job-1"], ['{"reason": "overlap-replaced"}'], None),
            {"live_runs_by_job", "live_runs_leased", "live_runs_pkey"},
        ),
        (
            "settle_overlap",
            ([5], [9], ["cancelled"], ['{"reason": "overlap-replaced"}'], None),
            {"live_runs_pkey"},
        ),
        (
            "dead_runs",
            ("t1", None, None, None, 50),
            {"finished_runs_*_tenant_finished_at_id_idx"},
        ),
        ("complete_succeeded", ([5, 9], [1, 2], None), {"live_runs_pkey"}),
        # Every attempt of a run: the attempt rows and the finished run's last attempt.
        ("attempts_of_run", (5,), {"attempts_*_run_id_attempt_idx", "finished_runs_*_id_idx"}),
        ("completion_of", (5, 1), {"attempts_*_run_id_attempt_idx", "finished_runs_*_id_idx"}),
        ("run_by_id", (5,), {"live_runs_pkey", "finished_runs_*_id_idx"}),
        (
            "insert_planned_runs",
            (
                ["t1"],
                ["job-1"],
                ["default"],
                [1],
                ["cron"],
                [3],
                [1.0],
                [10.0],
                [60],
                [DUE],
                [DUE],
                [None],
                ["t1/job-1@x"],
                [None],
                [0],
                [0],
                [False],
                None,
            ),
            # ON CONFLICT DO NOTHING arbitrates on every unique index of run_keys.
            set(),
        ),
        # A job's live runs are in two indexes: the leased ones apart (a lease grant
        # writes no live_runs_by_job entry). Whole-job reads take both.
        (
            "runs_of_job",
            ("t1", "job-1", None, None, 50),
            {"live_runs_by_job", "live_runs_leased", "finished_runs_*_tenant_job_id_idx"},
        ),
        ("job_statuses", (["t1"], ["job-1"]), {"live_runs_by_job", "live_runs_leased"}),
        ("job_table", ("t1", None, None, "all", "name", 50), {"live_runs_leased"}),
        ("reshard_job_size", ("t1", "job-1"), {"live_runs_by_job", "live_runs_leased"}),
        ("reshard_lock_job_runs", ("t1", "job-1"), {"live_runs_by_job", "live_runs_leased"}),
        ("reshard_copy_live_runs", ("t1", "job-1"), {"live_runs_by_job", "live_runs_leased"}),
        ("reshard_copy_attempts", ("t1", "job-1"), {"live_runs_by_job", "live_runs_leased"}),
        ("audit_of_tenant", ("t1", None, None, 50), {"audit_log_tenant_at"}),
        ("audit_of_tenant", ("t1", LATER, 5000, 50), {"audit_log_tenant_at"}),
        ("audit_of_job", ("t1", "job-1", None, None, 50), {"audit_log_job_at"}),
        ("audit_of_job", ("t1", "job-1", LATER, 5000, 50), {"audit_log_job_at"}),
    ],
)
async def test_hot_queries_use_their_index(
    busy_shard: asyncpg.Connection, query: str, args: tuple[Any, ...], indexes: set[str]
) -> None:
    """The plan reads each table through the index written for it, and scans none of
    the big ones (live_runs, finished_runs, run_keys) sequentially."""
    sql = queries.get(query)
    # Parameters added later (optional filters) are passed as NULL.
    wanted = len((await busy_shard.prepare(sql)).get_parameters())
    args = args + (None,) * (wanted - len(args))
    plan: Any = None
    with contextlib.suppress(_RolledBack):
        async with busy_shard.transaction():
            # The plan of what actually ran (ANALYZE), then rolled back.
            plan = json.loads(
                await busy_shard.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args)
            )
            raise _RolledBack
    # A partition's index is named after its partition: finished_runs_*_id_idx.
    used = {PARTITION_OF_HISTORY.sub(r"\1_*_", name) for name in _index_names(plan)}
    assert indexes <= used, (used, plan)
    scanned = {PARTITION_OF_HISTORY.sub(r"\1_*_", name) for name in _seq_scans(plan)}
    assert not scanned & {"live_runs", "finished_runs_*_", "run_keys"}, plan


PARTITION_OF_HISTORY = re.compile(r"^(finished_runs|attempts)_(?:default|\d{8})(?:_|$)")


class _RolledBack(Exception):
    pass


def _seq_scans(plan: Any) -> set[str]:
    """Relations read by a sequential scan over more than a few hundred rows (a
    partition still empty is scanned, rightly: there is nothing to index)."""
    found: set[str] = set()
    if isinstance(plan, dict):
        if plan.get("Node Type") == "Seq Scan":
            read = plan.get("Actual Rows", 0) * plan.get("Actual Loops", 1)
            if read + plan.get("Rows Removed by Filter", 0) > 500:
                found.add(plan["Relation Name"])
        for value in plan.values():
            found |= _seq_scans(value)
    elif isinstance(plan, list):
        for value in plan:
            found |= _seq_scans(value)
    return found


# --- running against the next release's schema (expand/contract) --------------------


def test_each_migration_says_which_code_still_runs_against_it() -> None:
    """By default the code one version back; a contraction, or a release's second
    expanding migration (which names the previous release's version), says so in its
    file. The floor never goes back: code refused by one migration stays refused."""
    floors = []
    for migration in migrate.migrations():
        assert migration.compatible_from <= migration.version - 1
        floors.append(migration.compatible_from)
    assert floors == sorted(floors)
    assert migrate.Migration(20, "expand", "ALTER TABLE t ADD c int;").compatible_from == 19
    contract = migrate.Migration(20, "contract", "-- compatible-from: 19\nDROP TABLE probe;")
    assert contract.compatible_from == 19
    for bad in ("-- compatible-from: 21\n", "-- compatible-from: 3\n-- compatible-from: 4\n"):
        with pytest.raises(RuntimeError, match="compatible-from"):
            _ = migrate.Migration(20, "bad", bad).compatible_from


async def test_a_shard_the_next_release_migrated_is_served_by_this_one(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    current = migrate.migrations()
    shards = shards_of(database_url)
    ahead = migrate.Migration(current[-1].version + 1, "ahead", "CREATE TABLE ahead (id int);")
    contract = migrate.Migration(
        ahead.version + 1, "contract", f"-- compatible-from: {ahead.version}\nDROP TABLE ahead;"
    )
    monkeypatch.setattr(migrate, "migrations", lambda: (*current, ahead))
    assert await _migrate_one(shards[0], TEST_SHARDS) == [ahead.version]
    monkeypatch.setattr(migrate, "migrations", lambda: (*current, ahead, contract))
    assert await _migrate_one(shards[1], TEST_SHARDS) == [ahead.version, contract.version]
    monkeypatch.setattr(migrate, "migrations", lambda: current)
    for shard in shards[:2]:
        conn = await database.connect(shard)
        try:
            recorded = await conn.fetch(
                "SELECT version, compatible_from FROM schema_version WHERE version > $1",
                current[-1].version,
            )
            if shard.number == 0:
                await migrate.check_shard(conn, shard, TEST_SHARDS)  # one ahead: served
                assert [tuple(r) for r in recorded] == [(ahead.version, ahead.version - 1)]
                continue
            assert [tuple(r) for r in recorded] == [
                (ahead.version, ahead.version - 1),
                (contract.version, ahead.version),
            ]
            with pytest.raises(SchemaMismatch) as caught:  # contracted past this release
                await migrate.check_shard(conn, shard, TEST_SHARDS)
        finally:
            await conn.close()
    assert caught.value.summary == (
        f"schema {contract.version} needs code of schema {ahead.version}, "
        f"code is {current[-1].version}"
    )


async def test_a_shard_migrated_before_compatibility_was_recorded_is_judged_alike(
    database_url: str,
) -> None:
    shard = shards_of(database_url)[2]
    conn = await database.connect(shard)
    try:
        await conn.execute("ALTER TABLE schema_version DROP COLUMN compatible_from")
        await migrate.check_shard(conn, shard, TEST_SHARDS)
        assert await migrate.migrate_shard(conn, shard, TEST_SHARDS) == []
        assert await conn.fetchval("SELECT count(compatible_from) FROM schema_version") == 0
    finally:
        await conn.close()
    assert await describe(shard) == catalog.canonical()
