"""Resharding: 4 shards become 8 with cron, delayed and leased runs in flight, each of
the 8 shards its own database. Every run exists exactly once afterwards, on the shard
the new count says; a worker's lease (its old run id and fencing token) still
heartbeats and completes; old run ids resolve over HTTP; cron fire times are not
materialised twice; a reshard cut short is finished by running it again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from conftest import ADMIN_TOKEN, scratch_database
from conftest import test_tokens as make_tokens
from polling import eventually

from tickwork.api.app import create_app
from tickwork.api.server import HttpServer
from tickwork.api.services import Services
from tickwork.coordination.kubernetes import KubernetesLeases
from tickwork.coordination.ownership import Fixed
from tickwork.core import hashing
from tickwork.core.clock import FrozenClock
from tickwork.core.errors import SchemaMismatch
from tickwork.core.records import Lease, Outcome
from tickwork.core.shards import ShardMap
from tickwork.core.spec import JobSpec, Schedule
from tickwork.engine import reshard
from tickwork.engine.dispatch import CompleteItem, HeartbeatItem
from tickwork.engine.installation import Installation
from tickwork.engine.jobs import EnqueueRequest
from tickwork.engine.metrics import Metrics
from tickwork.engine.queues import Queues
from tickwork.engine.scheduler import Scheduler
from tickwork.store import database as store_database
from tickwork.store import epochs, migrate, shard_leases
from tickwork.store.database import Database

TENANT = "acme"
ACTOR = "test"
LEFT_IN_A_TRANSACTION = """
SELECT count(*) = 0 FROM pg_stat_activity
WHERE application_name = $1 AND state LIKE 'idle in transaction%'
"""
OLD, NEW = 4, 8

# Attempts by run and the audit log by job: the history that moves with a job.
HISTORY = (
    "SELECT 'attempt', run_id::text, attempt, fencing_token, outcome FROM run_attempts"
    " UNION ALL SELECT tenant, job, id::int, null, action FROM audit_log"
)
RUNS = (
    "SELECT tenant, job, id, state, origin, due_at, attempt, fencing_token, lease_owner,"
    " lease_expires_at, idempotency_key, payload::text FROM runs"
)


def names(prefix: str) -> list[str]:
    """Job names covering each of the 8 shards at least twice, so every new shard gets
    jobs and every old shard keeps some."""
    found: list[str] = []
    count: Counter[int] = Counter()
    index = 0
    while min(count[s] for s in range(NEW)) < 2:
        name = f"{prefix}-{index}"
        index += 1
        shard = hashing.shard_of(TENANT, name, NEW)
        if count[shard] < 2:
            found.append(name)
            count[shard] += 1
    return found


async def all_rows(database: Database, query: str) -> dict[int, list[tuple[object, ...]]]:
    rows = {}
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            rows[shard] = [tuple(r) for r in await conn.fetch(query)]
    return rows


def flat(rows: dict[int, list[tuple[object, ...]]]) -> Counter[tuple[object, ...]]:
    return Counter(row for found in rows.values() for row in found)


@dataclass
class Installed:
    """What a populated 4-shard installation had before the reshard."""

    runs: Counter[tuple[object, ...]]
    definitions: Counter[tuple[object, ...]]
    keys: Counter[tuple[object, ...]]
    leases: list[Lease]
    cron: list[str]
    history: Counter[tuple[object, ...]]


async def populate(database: Database, clock: FrozenClock) -> Installed:
    """Cron jobs materialised ahead, delayed runs (some with idempotency keys and
    payloads), leased runs held by a worker, and a finished run with its attempt."""
    engine = Installation.over(database, clock=clock)
    jobs = engine.jobs
    cron = names("cron")
    for name in cron:
        await jobs.put(
            TENANT, name, JobSpec(schedule=Schedule(cron="* * * * *", jitter_seconds=0)), ACTOR
        )
    for index, name in enumerate(names("later")):
        await jobs.put(TENANT, name, JobSpec(), ACTOR)
        await jobs.enqueue(
            TENANT,
            name,
            EnqueueRequest(
                delay_seconds=600,
                idempotency_key=f"key-{index}",
                payload={"n": index},
                payload_given=True,
            ),
            ACTOR,
        )
    leased = names("busy")
    for name in leased:
        await jobs.put(TENANT, name, JobSpec(), ACTOR)
        for _ in range(2):
            await jobs.enqueue(TENANT, name, EnqueueRequest(), ACTOR)
    scheduler = Scheduler(database, ownership=Fixed(range(OLD)), clock=clock)
    await scheduler.pass_once()
    granted = await engine.dispatcher.lease(
        ["default"], limit=100, worker_id="w1", lease_seconds=300
    )
    assert len(granted) == 2 * len(leased)
    # One run of each job finishes: history (a finished run, its attempt) moves too.
    done = {lease.job: lease for lease in granted}
    answers = await engine.dispatcher.complete(
        [
            CompleteItem(lease.run_id, lease.fencing_token, Outcome.succeeded)
            for lease in done.values()
        ]
    )
    assert all(not isinstance(a, Exception) for a in answers)
    held = [lease for lease in granted if lease not in done.values()]
    installed = Installed(
        runs=flat(await all_rows(database, RUNS)),
        definitions=flat(
            await all_rows(
                database, "SELECT tenant, name, next_due_at, spec::text FROM definitions"
            )
        ),
        keys=flat(
            await all_rows(database, "SELECT tenant, job, due_at, idempotency_key FROM run_keys")
        ),
        leases=held,
        cron=cron,
        history=flat(await all_rows(database, HISTORY)),
    )
    states = Counter(row[3] for row in installed.runs)
    assert states["scheduled"] >= len(cron) and states["leased"] == len(leased)
    assert states["succeeded"] == len(leased)
    return installed


def on_expected_shards(rows: dict[int, list[tuple[object, ...]]]) -> None:
    for shard, found in rows.items():
        for row in found:
            tenant, job = row[0], row[1]
            assert isinstance(tenant, str) and isinstance(job, str)
            assert hashing.shard_of(tenant, job, NEW) == shard, (shard, row)


@pytest.fixture
async def eight(server_url: str) -> AsyncIterator[list[str]]:
    """Eight empty databases, the first four holding shards 0..3 of 4."""
    async with contextlib.AsyncExitStack() as stack:
        urls = [
            await stack.enter_async_context(scratch_database(server_url, f"tickwork_reshard{n}"))
            for n in range(NEW)
        ]
        await migrate.migrate_all(ShardMap.from_dsns(urls[:OLD]).shards)
        yield urls


async def test_four_shards_become_eight_with_runs_in_flight(
    eight: list[str], clock: FrozenClock
) -> None:
    before_map = ShardMap.from_dsns(eight[:OLD])
    async with Database(before_map) as old:
        await Queues(old, clock).pause(TENANT, "paused-queue", ACTOR)
        installed = await populate(old, clock)
        async with old.connection(1) as conn:
            first_id_of_shard_1 = await conn.fetchval("SELECT nextval('run_ids')")

    resharder = reshard.Resharder(ShardMap.from_dsns(eight), clock=clock)
    report = await resharder.run()

    assert report.jobs > 0 and {m.to for m in report.shards if m.jobs} == {4, 5, 6, 7}
    async with Database(ShardMap.from_dsns(eight)) as new:
        for shard in new.shard_map.shards:
            async with new.connection(shard.number) as conn:
                await migrate.check_shard(conn, shard, NEW)  # the roles accept every shard
        runs = await all_rows(new, RUNS)
        # Every run exactly once, unchanged (state, lease, token, key, payload), on the
        # shard the new count gives its job.
        assert flat(runs) == installed.runs
        on_expected_shards(runs)
        assert all(runs[s] for s in range(OLD, NEW)), "every new shard holds runs"
        definitions = await all_rows(
            new, "SELECT tenant, name, next_due_at, spec::text FROM definitions"
        )
        assert flat(definitions) == installed.definitions
        on_expected_shards(definitions)
        keys = await all_rows(new, "SELECT tenant, job, due_at, idempotency_key FROM run_keys")
        assert flat(keys) == installed.keys
        on_expected_shards(keys)
        assert flat(await all_rows(new, HISTORY)) == installed.history
        # Every shard, the new ones too, holds the pause: their claims skip the queue.
        pauses = await all_rows(new, "SELECT tenant, queue FROM queue_pauses")
        assert all(pauses[s] == [(TENANT, "paused-queue")] for s in range(NEW)), pauses
        attempts = sum(n for row, n in installed.history.items() if row[0] == "attempt")
        assert attempts == len(installed.leases)
        for shard in range(OLD, NEW):
            async with new.connection(shard) as conn:
                # The next lease of a moved run gets a token above any its workers hold.
                highest = await conn.fetchval("SELECT max(fencing_token) FROM runs")
                assert await conn.fetchval("SELECT nextval('fencing_tokens')") > (highest or 0)

        engine = Installation.over(new, clock=clock)
        # A worker holding a lease from before: heartbeat and complete with its run id
        # and fencing token, on whichever shard the run is now.
        moved = [
            lease
            for lease in installed.leases
            if hashing.shard_of(lease.tenant, lease.job, NEW) >= OLD
        ]
        assert moved
        beats = await engine.dispatcher.heartbeat(
            [HeartbeatItem(lease.run_id, lease.fencing_token, 60) for lease in moved]
        )
        assert all(not isinstance(b, Exception) for b in beats), beats
        done = await engine.dispatcher.complete(
            [CompleteItem(lease.run_id, lease.fencing_token, Outcome.succeeded) for lease in moved]
        )
        assert all(not isinstance(d, Exception) for d in done), done
        # A stale token is still refused after the move.
        [stale] = await engine.dispatcher.heartbeat(
            [HeartbeatItem(moved[0].run_id, moved[0].fencing_token - 1, 60)]
        )
        assert type(stale).__name__ == "StaleLease"

        # Old run ids resolve over HTTP (GET /v1/runs/{id}), now as the new shard's.
        services = Services(engine=engine, authenticator=make_tokens(), metrics=Metrics())
        server = HttpServer(create_app(services), port=0)
        url = await server.start()
        try:
            async with httpx.AsyncClient(base_url=url) as http:
                for lease in moved:
                    answer = await http.get(
                        f"/v1/runs/{lease.run_id}",
                        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                    )
                    assert answer.status_code == 200, answer.text
                    body = answer.json()
                    now_on = hashing.shard_of(lease.tenant, lease.job, NEW)
                    assert body["runId"] == f"r{now_on}-{lease.id}"
                    assert body["state"] == "succeeded"
                missing = await http.get(
                    "/v1/runs/r1-999999", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
                )
                assert missing.status_code == 404
        finally:
            await server.stop()

        # New runs on a new shard take ids above the old shard's: no id is taken twice.
        job = next(n for n in installed.cron if hashing.shard_of(TENANT, n, NEW) == 5)
        run, _ = await engine.jobs.enqueue(TENANT, job, EnqueueRequest(), ACTOR)
        assert run.shard == 5 and run.id > first_id_of_shard_1

        # The schedulers of 8 shards materialise each cron fire time once: the ones
        # materialised before the move are not inserted again, the next ones follow.
        scheduler = Scheduler(new, ownership=Fixed(range(NEW)), clock=clock)
        for _ in range(3):
            await scheduler.pass_once()
            clock.advance(60)
        cron = await all_rows(new, "SELECT tenant, job, due_at FROM runs WHERE origin = 'cron'")
        per_job = Counter((row[1]) for row in flat(cron))
        assert set(flat(cron).values()) == {1}
        start = min(row[2] for row in flat(cron))
        assert isinstance(start, type(clock.now()))
        for name in installed.cron:
            times = sorted(row[2] for row in flat(cron) if row[1] == name)
            assert times == [start + timedelta(minutes=m) for m in range(len(times))], name
        assert min(per_job.values()) >= 3


async def test_refused_while_a_role_is_connected_or_a_scheduler_holds_a_lease(
    database_url: str, clock: FrozenClock
) -> None:
    after = ShardMap.from_dsns([database_url], NEW)
    resharder = reshard.Resharder(after, clock=clock)
    async with Database(ShardMap.from_dsns([database_url], OLD)) as roles, roles.connection(0):
        reasons = await resharder.refusals()
        assert any("tickwork-shard-0" in r for r in reasons), reasons
        with pytest.raises(reshard.Refused):
            await resharder.run()
    async with contextlib.AsyncExitStack() as stack:
        conn = await store_database.connect(after[2], name="a-test")
        stack.push_async_callback(conn.close)
        assert await shard_leases.hold(conn, "scheduler-a", 10, clock.now())
        reasons = await resharder.refusals()
        assert reasons == ["shard 2 is leased by scheduler 'scheduler-a' for 10s more"]
        clock.advance(11)  # an expired lease (its scheduler gone) is no obstacle
        assert await resharder.refusals() == []
    # Nothing was touched: the installation still has 4 shards.
    assert (await resharder.state()).from_count == OLD


async def test_an_interrupted_reshard_is_finished_by_running_it_again(
    database_url: str, clock: FrozenClock
) -> None:
    url = database_url
    async with Database(ShardMap.from_dsns([url], OLD)) as old:
        installed = await populate(old, clock)
    after = ShardMap.from_dsns([url], NEW)
    first = reshard.Resharder(after, clock=clock)
    first.test_signals.init()
    task = asyncio.create_task(first.run())
    # Cut it short between a job's copy (committed on its new shard) and its
    # forgetting on the old one: the worst moment.
    for _ in range(3):
        shard, tenant, job = await first.test_signals.copied.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    # Looked at through connections of its own: the roles' pools refuse these shards.
    watcher = await store_database.connect(after[0])
    try:
        # Cut short, its sessions end with it: none is left in a transaction holding
        # the job's locks for the run below to wait on (a cancelled statement's rollback
        # used to wait for a cancel request the server never answered, for a minute).
        await eventually(
            lambda: watcher.fetchval(LEFT_IN_A_TRANSACTION, reshard.APPLICATION_NAME),
            within=10,
            what="the interrupted reshard's sessions ending",
        )
    finally:
        await watcher.close()
    copies = 0
    for number in range(NEW):
        conn = await store_database.connect(after[number])
        try:
            copies += await conn.fetchval(
                "SELECT count(*) FROM definitions WHERE tenant = $1 AND name = $2",
                tenant,
                job,
            )
        finally:
            await conn.close()
    assert copies == 2  # copied, not yet forgotten
    conn = await store_database.connect(after[shard])
    try:
        # Every role's readiness says so, and no scheduler takes the shard.
        with pytest.raises(SchemaMismatch, match="run `tickwork reshard --to 8` again"):
            await migrate.check_shard(conn, after[shard], NEW)
        with pytest.raises(epochs.Resharding):
            await epochs.take(conn, "scheduler-a")
    finally:
        await conn.close()

    state = await reshard.Resharder(after, clock=clock).state()
    assert state.resuming and (state.from_count, state.to_count) == (OLD, NEW)
    await reshard.Resharder(after, clock=clock).run()

    async with Database(after) as new:
        runs = await all_rows(new, RUNS)
        assert flat(runs) == installed.runs
        on_expected_shards(runs)
        definitions = await all_rows(
            new, "SELECT tenant, name, next_due_at, spec::text FROM definitions"
        )
        assert flat(definitions) == installed.definitions
        journal = await all_rows(new, "SELECT role, phase FROM reshard_journal")
        assert {s: rows for s, rows in journal.items()} == {
            s: [("source" if s < OLD else "target", "done")] for s in range(NEW)
        }
    again = await reshard.Resharder(after, clock=clock).state()
    assert again.done


def tickwork(
    *arguments: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tickwork", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TICKWORK_COORDINATION": "postgres", **(env or {})},
        check=False,
    )


async def test_the_command_dry_run_moves_nothing_and_the_real_run_reshards(
    database_url: str, clock: FrozenClock
) -> None:
    async with Database(ShardMap.from_dsns([database_url], OLD)) as old:
        jobs = Installation.over(old, clock=clock).jobs
        for name in names("job"):
            await jobs.put(TENANT, name, JobSpec(), ACTOR)
            await jobs.enqueue(TENANT, name, EnqueueRequest(), ACTOR)
    moving = sum(hashing.shard_of(TENANT, n, NEW) >= OLD for n in names("job"))

    dry = await asyncio.to_thread(
        tickwork, "reshard", "--database-url", database_url, "--to", "8", "--dry-run"
    )
    assert dry.returncode == 0, dry.stderr
    assert f"in all: {moving} jobs, {moving} runs" in dry.stdout
    assert "shard 1 -> 5: would move" in dry.stdout
    assert (
        await reshard.Resharder(ShardMap.from_dsns([database_url], NEW)).state()
    ).from_count == OLD

    wrong = await asyncio.to_thread(
        tickwork, "reshard", "--database-url", database_url, "--to", "6"
    )
    assert wrong.returncode == 1 and "a reshard doubles them, to 8" in wrong.stderr

    done = await asyncio.to_thread(tickwork, "reshard", "--database-url", database_url, "--to", "8")
    assert done.returncode == 0, done.stderr
    assert f"{moving} jobs and {moving} runs moved" in done.stdout
    assert "shard 1: done:" in done.stderr  # the progress log, counts per shard
    again = await asyncio.to_thread(
        tickwork, "reshard", "--database-url", database_url, "--to", "8"
    )
    assert again.returncode == 0 and "nothing to do" in again.stdout


async def test_the_command_refuses_while_kubernetes_leases_are_held(
    database_url: str, kube: Any
) -> None:
    await kube.create_namespace("tickwork")
    leases = await KubernetesLeases.connect("tickwork", OLD, kubeconfig=str(kube.kubeconfig))
    try:
        await leases.observe("scheduler-a", 60)  # its member Lease
        assert await leases.hold(3, "scheduler-a", 60)

        def command() -> subprocess.CompletedProcess[str]:
            return tickwork(
                *("reshard", "--database-url", database_url, "--to", "8"),
                *("--coordination", "kubernetes", "--lease-namespace", "tickwork"),
                env={"KUBECONFIG": str(kube.kubeconfig)},
            )

        refused = await asyncio.to_thread(command)
        assert refused.returncode == 1, refused.stderr
        assert "Lease tickwork/tickwork-shard-3 is held by 'scheduler-a'" in refused.stderr
        assert "scheduler 'scheduler-a' is live (its member Lease)" in refused.stderr
        state = await reshard.Resharder(ShardMap.from_dsns([database_url], NEW)).state()
        assert state.from_count == OLD and not state.resuming  # nothing was touched

        await leases.release(3, "scheduler-a")
        await leases.leave("scheduler-a")
        done = await asyncio.to_thread(command)
        assert done.returncode == 0, done.stderr
    finally:
        await leases.close()


def test_every_table_of_a_shard_is_moved_by_job_or_tenant_or_kept_by_the_shard() -> None:
    """A migration that adds a table must say here how a reshard treats it."""
    from tickwork.store import catalog
    from tickwork.store import reshard as store_reshard

    tables = set(re.findall(r"^CREATE TABLE (\w+) ", catalog.canonical(), re.MULTILINE))
    tables -= {"attempts_default", "finished_runs_default"}  # partitions of moved tables
    handled = (
        [name for name, _ in store_reshard.JOB_TABLES]
        + list(store_reshard.JOB_MARKS)
        + list(store_reshard.TENANT_TABLES)
        + list(store_reshard.REPLICATED_TABLES)
        + list(store_reshard.SHARD_TABLES)
    )
    assert sorted(handled) == sorted(tables)


async def test_a_reshard_killed_mid_way_is_finished_by_running_it_again(
    database_url: str, clock: FrozenClock
) -> None:
    async with Database(ShardMap.from_dsns([database_url], OLD)) as old:
        jobs = Installation.over(old, clock=clock).jobs
        for index in range(160):
            await jobs.put(TENANT, f"job-{index}", JobSpec(), ACTOR)
            await jobs.enqueue(TENANT, f"job-{index}", EnqueueRequest(), ACTOR)
        before = flat(await all_rows(old, RUNS))
    after = ShardMap.from_dsns([database_url], NEW)

    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tickwork", "reshard", "--database-url", database_url),
        *("--to", "8"),
        env={**os.environ, "TICKWORK_COORDINATION": "postgres"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    watcher = await store_database.connect(after[0], name="a-test")
    try:
        async with asyncio.timeout(30):
            while True:  # SIGKILL once shard 0 has moved a few jobs
                moved = await watcher.fetchval(
                    "SELECT moved_jobs FROM reshard_journal WHERE phase = 'moving'"
                )
                if moved is not None and moved >= 3:
                    break
                await asyncio.sleep(0.005)
    finally:
        await watcher.close()
        process.kill()
        await process.wait()

    state = await reshard.Resharder(after).state()
    assert state.resuming, "the reshard was killed mid-way"
    finished = await asyncio.to_thread(
        tickwork, "reshard", "--database-url", database_url, "--to", "8"
    )
    assert finished.returncode == 0, finished.stderr
    assert "resuming the reshard from 4 to 8 shards" in finished.stderr
    async with Database(after) as new:
        runs = await all_rows(new, RUNS)
        assert flat(runs) == before
        on_expected_shards(runs)


async def test_an_old_run_id_follows_its_run_across_two_reshards(
    database_url: str, clock: FrozenClock
) -> None:
    # Shard 13 of 16 is shard 5 of 8 and shard 1 of 4: two hops.
    name = next(
        f"twice-{n}" for n in range(10_000) if hashing.shard_of(TENANT, f"twice-{n}", 16) == 13
    )
    async with Database(ShardMap.from_dsns([database_url], OLD)) as old:
        engine = Installation.over(old, clock=clock)
        await engine.jobs.put(TENANT, name, JobSpec(), ACTOR)
        await engine.jobs.enqueue(TENANT, name, EnqueueRequest(), ACTOR)
        [lease] = await engine.dispatcher.lease(
            ["default"], limit=1, worker_id="w1", lease_seconds=300
        )
    assert lease.shard == 1
    for count in (8, 16):
        await reshard.Resharder(ShardMap.from_dsns([database_url], count), clock=clock).run()

    async with Database(ShardMap.from_dsns([database_url], 16)) as new:
        engine = Installation.over(new, clock=clock)
        run, _ = await engine.jobs.run(lease.run_id)
        assert run.run_id == f"r13-{lease.id}" and run.state.value == "leased"
        [beat] = await engine.dispatcher.heartbeat(
            [HeartbeatItem(lease.run_id, lease.fencing_token, 60)]
        )
        assert not isinstance(beat, Exception), beat
        # The intermediate id (shard 5 of 8) resolves too.
        run, _ = await engine.jobs.run(f"r5-{lease.id}")
        assert run.run_id == f"r13-{lease.id}"
