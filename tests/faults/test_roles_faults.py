"""Every role at once (scheduler, API, worker SDK) through a PostgreSQL crash and
restart, and through dispatcher links that reset and hang past the lease: every role
stays up and recovers by itself, and every run ends exactly as its job says, with no
stale completion accepted."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from conftest import WORKER_TOKEN
from polling import eventually

from faults.conftest import FAST_POOLS, SHARDS, Api, proxied_map, serving
from faults.postgres import PostgresProcess
from faults.proxy import TcpProxy
from tickwork.core.records import State
from tickwork.core.settings import SchedulerSettings
from tickwork.core.shards import ShardMap
from tickwork.core.spec import JobSpec
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.metrics import Metrics
from tickwork.engine.scheduler import Scheduler
from tickwork.store.database import Database
from tickwork.worker import NonRetryableError, RunContext, RunResult, Worker

TERMINAL = {State.succeeded, State.dead, State.cancelled, State.discarded, State.skipped}
# What each job's runs must end as, and with how many attempts at most.
JOBS = {
    "fine": {"retry": {"maxAttempts": 50, "baseSeconds": 0.05, "maxSeconds": 0.2}},
    "poison": {"retry": {"maxAttempts": 2, "baseSeconds": 0.05, "maxSeconds": 0.1}},
    "fatal": {"retry": {"maxAttempts": 50, "baseSeconds": 0.05, "maxSeconds": 0.2}},
}
EXPECTED = {"fine": State.succeeded, "poison": State.dead, "fatal": State.dead}


@dataclass
class Cluster:
    jobs: Jobs  # on the scheduler's links: the checks' view of the store
    api: Api
    scheduler: Scheduler
    worker: Worker
    tasks: list[asyncio.Task[None]]
    results: list[RunResult]

    def alive(self) -> bool:
        return not any(task.done() for task in self.tasks)


async def handler(context: RunContext) -> None:
    await asyncio.sleep(random.uniform(0.005, 0.03))
    if context.job == "poison":
        raise RuntimeError("always fails")
    if context.job == "fatal":
        raise NonRetryableError("fails for good")


@contextlib.asynccontextmanager
async def cluster(
    scheduler_map: ShardMap, api_map: ShardMap, lease_seconds: float = 30
) -> AsyncIterator[Cluster]:
    stop = asyncio.Event()
    async with (
        Database(scheduler_map, FAST_POOLS) as scheduler_database,
        serving(api_map) as api,
    ):
        scheduler = Scheduler(
            scheduler_database,
            SchedulerSettings(interval=0.05, retry_base_seconds=0.05, retry_max_seconds=0.2),
            metrics=Metrics(),
        )
        results: list[RunResult] = []
        worker = Worker(
            api.url,
            WORKER_TOKEN,
            concurrency=16,
            lease_seconds=lease_seconds,
            wait_seconds=1,
            retry_base_seconds=0.05,
            retry_max_seconds=0.3,
            request_timeout=3,
            on_result=results.append,
        )
        worker.register(handler)
        tasks = [
            asyncio.create_task(scheduler.run(stop)),
            asyncio.create_task(worker.run()),
        ]
        jobs = Jobs(scheduler_database)
        # The set-up is not under test: it gets the default pool waits, not the fast
        # ones, since connecting can take longer than 0.5 s on a busy machine.
        async with Database(scheduler_map) as setup_database:
            setup = Jobs(setup_database)
            for name, spec in JOBS.items():
                await setup.put("acme", name, JobSpec.model_validate(spec), "test")
        try:
            yield Cluster(jobs, api, scheduler, worker, tasks, results)
        finally:
            stop.set()
            worker.stop()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 15)


async def enqueue(jobs: Jobs, counts: dict[str, int]) -> dict[str, str]:
    """Enqueue runs; return run id -> job."""
    made = {}
    for name, count in counts.items():
        for _ in range(count):
            run, _ = await jobs.enqueue("acme", name, EnqueueRequest(), "test")
            made[run.run_id] = name
    return made


async def finished(jobs: Jobs, made: dict[str, str]) -> int:
    """How many of the runs are in a terminal state (one query per shard)."""
    by_shard: dict[int, list[int]] = {}
    for run_id in made:
        shard, local = jobs.locate_run(run_id)
        by_shard.setdefault(shard, []).append(local)
    done = 0
    for shard, ids in by_shard.items():
        async with jobs.database.connection(shard) as conn:
            done += await conn.fetchval(
                "SELECT count(*) FROM runs WHERE id = ANY($1::bigint[]) AND state = ANY($2)",
                ids,
                [state.value for state in TERMINAL],
            )
    return done


async def all_finished(cluster: Cluster, made: dict[str, str], within: float = 30) -> None:
    """Wait until every run is terminal; fail naming the ones that are not."""

    async def done() -> bool:
        return await finished(cluster.jobs, made) == len(made)

    try:
        await eventually(done, within=within, every=0.1, what="every run finished")
    except pytest.fail.Exception:
        pending = []
        for run_id in made:
            run, attempts = await cluster.jobs.run(run_id)
            if run.state not in TERMINAL:
                pending.append((run_id, run.state, run.attempt, run.lease_expires_at, attempts))
        pytest.fail(f"{len(pending)} run(s) unfinished: {pending[:5]}")


async def check(cluster: Cluster, made: dict[str, str]) -> None:
    """Every run ended as its job says; no completion was accepted for an attempt the
    store had already given up (lease expired) or recorded otherwise."""
    accepted = {(r.run_id, r.attempt): r for r in cluster.results if r.state is not None}
    for run_id, name in made.items():
        run, attempts = await cluster.jobs.run(run_id)
        assert run.state is EXPECTED[name], (run_id, name, run.state, attempts)
        by_number = {a.attempt: a for a in attempts}
        assert sorted(by_number) == list(range(1, run.attempt + 1)), attempts
        assert sum(a.outcome == "succeeded" for a in attempts) == (name == "fine")
        if name == "poison":
            assert run.attempt == 2  # the DLQ holds it after exactly maxAttempts
        for (accepted_run, number), result in accepted.items():
            if accepted_run == run_id:
                assert by_number[number].outcome == result.outcome, (result, attempts)
    dead = {run_id for run_id, name in made.items() if EXPECTED[name] is State.dead}
    in_dlq = set()
    for shard in range(SHARDS):
        async with cluster.jobs.database.connection(shard) as conn:
            for row in await conn.fetch("SELECT id FROM runs WHERE state = 'dead'"):
                in_dlq.add(f"r{shard}-{row['id']}")
    assert in_dlq == dead


async def test_every_role_rides_out_a_crash_and_restart(
    postgres: PostgresProcess, fault_url: str
) -> None:
    shard_map = ShardMap.from_dsns([fault_url], SHARDS)
    # Short leases: a claim committed just before the crash whose answer was lost holds
    # its run until the lease runs out, as it must; then the run is worked again.
    async with cluster(shard_map, shard_map, lease_seconds=2) as roles:
        made = await enqueue(roles.jobs, {"fine": 120, "poison": 10, "fatal": 10})
        await eventually(lambda: len(roles.results) >= 20, what="some runs done before the crash")
        postgres.stop("immediate")
        await eventually(
            lambda: (
                roles.scheduler.metrics is not None
                and roles.scheduler.metrics.scheduler_errors.labels("outage")._value.get() > 0
            ),
            what="the scheduler noticing",
        )
        postgres.start()
        more = await enqueue(roles.jobs, {"fine": 20})
        made |= more

        await all_finished(roles, made)
        assert roles.alive()
        await check(roles, made)


async def test_links_that_reset_and_hang_past_the_lease_cost_attempts_not_runs(
    postgres: PostgresProcess, fault_url: str, proxies: list[TcpProxy]
) -> None:
    direct = ShardMap.from_dsns([fault_url], SHARDS)
    async with cluster(direct, proxied_map(fault_url, proxies), lease_seconds=1) as roles:
        made = await enqueue(roles.jobs, {"fine": 120, "poison": 10, "fatal": 10})
        await eventually(lambda: len(roles.results) >= 10, what="work under way")
        for proxy in proxies:
            proxy.reset()
        await eventually(lambda: len(roles.results) >= 40, what="work after the resets")
        for proxy in proxies:  # the dispatcher cut off for longer than the leases
            proxy.hang()
        # The reaper's pass, not the 1 s lease, sets the pace here: on a busy machine the
        # scheduler's processes get their turn late, so the wait is generous.
        await eventually(
            lambda: any_expired(roles.jobs), within=30, what="a lease expired while cut off"
        )
        for proxy in proxies:
            proxy.heal()

        await all_finished(roles, made)
        assert roles.alive()
        await check(roles, made)
        # The worker that lost its leases was told so (a refused completion or a
        # heartbeat answering lease lost), and nothing it reported late was accepted.
        assert any(r.outcome == "dropped" or r.problem is not None for r in roles.results)


async def any_expired(jobs: Jobs) -> bool:
    for shard in range(SHARDS):
        async with jobs.database.connection(shard) as conn:
            if await conn.fetchval("SELECT count(*) FROM attempts WHERE outcome = 'lease-expired'"):
                return True
    return False
