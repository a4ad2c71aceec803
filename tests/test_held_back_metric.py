"""``tickwork_runs_held_back``: the scheduler's observer reports, per job and limit, the
ready runs that a full concurrency bucket or a used-up rate window holds back, and drops
a series once nothing is held back."""

from __future__ import annotations

from datetime import timedelta

import orjson

from tickwork.core.clock import FrozenClock
from tickwork.core.records import Outcome
from tickwork.core.spec import JobSpec, parse
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.engine.jobs import Jobs
from tickwork.engine.metrics import JobLabels, Metrics
from tickwork.engine.observer import ShardObserver
from tickwork.store.database import Database


async def _job(jobs: Jobs, name: str, spec: dict[str, object], payloads: list[object]) -> None:
    await jobs.put("acme", name, parse(JobSpec, spec), "test")
    chunk = [orjson.dumps(p) for p in payloads]
    assert await jobs.enqueue_ready("acme", name, chunk, "test") is not None


async def test_the_observer_reports_runs_held_back_per_job_and_limit(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await _job(jobs, "deploy", {"concurrency": 1}, [{"n": n} for n in range(3)])
    await _job(
        jobs,
        "mail",
        {"rateLimit": {"limit": 2, "periodSeconds": 60}},
        [{"n": n} for n in range(5)],
    )
    await _job(
        jobs,
        "sync",
        {"concurrency": 1, "concurrencyKey": {"key": "/customer"}},
        [{"customer": "a"}, {"customer": "a"}, {"customer": "b"}],
    )
    await _job(jobs, "free", {"concurrency": 5}, [{"n": n} for n in range(2)])
    dispatcher = Dispatcher(database, clock)
    leased = await dispatcher.lease(["default"], limit=100, worker_id="w", lease_seconds=60)
    # deploy 1, mail 2, sync a and b, free 2.
    assert len(leased) == 7
    metrics = Metrics(job_labels=JobLabels(["acme/*"]))
    observer = ShardObserver(metrics, interval=timedelta(0), canary=False)

    async def observe() -> None:
        for shard in range(database.shard_count):
            async with database.connection(shard) as conn:
                await observer.observe(conn, shard, clock.now())

    def held(job: str, limit: str) -> float | None:
        return metrics.registry.get_sample_value(
            "tickwork_runs_held_back", {"tickwork_job": f"acme/{job}", "limit": limit}
        )

    await observe()
    assert held("deploy", "concurrency") == 2
    assert held("mail", "rate") == 3
    # Key a has one run held back; key b none.
    assert held("sync", "concurrency") == 1
    assert held("free", "concurrency") is None
    assert held("deploy", "rate") is None

    # deploy's run ends: its bucket frees, its series goes. The rate window moves on.
    [deploy] = [g for g in leased if g.job == "deploy"]
    await dispatcher.complete(
        [CompleteItem(deploy.run_id, deploy.fencing_token, Outcome.succeeded)]
    )
    clock.advance(61)
    await observe()
    assert held("deploy", "concurrency") is None
    assert held("mail", "rate") is None
    assert held("sync", "concurrency") == 1
