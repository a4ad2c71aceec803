"""The scheduler keeps going through database outages: it logs each failing shard, backs
off, and picks up by itself once the database is back."""

from __future__ import annotations

import logging

import pytest
from polling import eventually

from faults.conftest import FAST_POOLS, SHARDS, failures, proxied_map, running
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


def fast_scheduler(database: Database) -> Scheduler:
    settings = SchedulerSettings(interval=0.05, retry_base_seconds=0.05, retry_max_seconds=0.2)
    scheduler = Scheduler(database, settings, metrics=Metrics())
    scheduler.test_signals.init()
    return scheduler


async def passes(scheduler: Scheduler, count: int) -> None:
    """Wait for ``count`` more passes over the shards (each within 5 s)."""
    for _ in range(count):
        await scheduler.test_signals.passed.wait(5)


async def promoted(jobs: Jobs, name: str) -> str:
    """Enqueue a run due shortly and return its id (the scheduler makes it ready)."""
    run, _ = await jobs.enqueue("acme", name, EnqueueRequest(delay_seconds=0.1), "test")
    return run.run_id


async def state(jobs: Jobs, run_id: str) -> State:
    run, _ = await jobs.run(run_id)
    return run.state


async def test_survives_an_immediate_stop_and_restart(
    postgres: PostgresProcess, fault_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "tickwork.engine.scheduler")
    async with Database(ShardMap.from_dsns([fault_url], SHARDS), FAST_POOLS) as database:
        jobs = Jobs(database)
        await jobs.put("acme", "report", JobSpec(), "test")
        scheduler = fast_scheduler(database)
        async with running(scheduler) as task:
            await passes(scheduler, 2)
            postgres.stop("immediate")  # a crash: every pooled connection dies
            await eventually(lambda: failures(scheduler) >= SHARDS, what="failed passes")
            postgres.start()
            run_id = await promoted(jobs, "report")
            await eventually(
                lambda: _is(jobs, run_id, State.ready), what="a run made ready after restart"
            )
            assert not task.done()
    assert "unavailable" in caplog.text and "retry" in caplog.text


async def _is(jobs: Jobs, run_id: str, expected: State) -> bool:
    return await state(jobs, run_id) is expected


async def test_survives_a_database_that_is_starting_up(
    fault_url: str, proxies: list[TcpProxy], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "tickwork.engine.scheduler")
    async with Database(proxied_map(fault_url, proxies), FAST_POOLS) as database:
        jobs = Jobs(database)
        await jobs.put("acme", "report", JobSpec(), "test")
        scheduler = fast_scheduler(database)
        async with running(scheduler) as task:
            await passes(scheduler, 2)
            for proxy in proxies:  # PostgreSQL restarted: old links gone, new ones refused
                proxy.reset()
                proxy.starting_up()
            await eventually(lambda: "CannotConnectNowError" in caplog.text, what="57P03 seen")
            await eventually(lambda: failures(scheduler) >= 2 * SHARDS, what="repeated tries")
            for proxy in proxies:
                proxy.heal()
            run_id = await promoted(jobs, "report")
            await eventually(lambda: _is(jobs, run_id, State.ready), within=5, what="recovery")
            assert not task.done()
            assert failures(scheduler, "error") == 0


async def test_a_hung_shard_does_not_hold_up_the_others(
    fault_url: str, proxies: list[TcpProxy]
) -> None:
    async with Database(proxied_map(fault_url, proxies), FAST_POOLS) as database:
        jobs = Jobs(database)
        names = {jobs.shard_of("acme", f"job-{n}"): f"job-{n}" for n in range(40)}
        assert len(names) == SHARDS
        for name in names.values():
            await jobs.put("acme", name, JobSpec(), "test")
        scheduler = fast_scheduler(database)
        async with running(scheduler) as task:
            await passes(scheduler, 2)
            hung = 1
            proxies[hung].hang()
            await eventually(lambda: failures(scheduler) >= 1, what="the hung shard noticed")
            healthy = [await promoted(jobs, names[s]) for s in range(SHARDS) if s != hung]
            for run_id in healthy:
                await eventually(
                    lambda run_id=run_id: _is(jobs, run_id, State.ready),
                    within=2,
                    what="healthy shards served while one hangs",
                )
            proxies[hung].heal()
            run_id = await promoted(jobs, names[hung])
            await eventually(lambda: _is(jobs, run_id, State.ready), within=5, what="recovery")
            assert not task.done()
