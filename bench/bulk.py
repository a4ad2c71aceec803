"""A bulk replay after an outage, and what it costs the other tenants.

50 000 dead runs of one tenant over 4 shards are replayed by one operation, worked on
by the scheduler (in a thread of its own, as it would be a process of its own), which is
stopped when the operation is about 40 % through and replaced by a new scheduler
instance that takes the shards over and finishes it. Meanwhile another tenant enqueues
a run every 10 ms and a worker long-polls its queue: its start lag (enqueue → lease) is
measured before the replay and while it runs. The case checks that the operation ends
with exactly one replayed run per dead run and one audit entry.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta

from bench import Context, Row, Table, register
from bench.harness import percentile, scaled
from tickwork.coordination.ownership import Fixed
from tickwork.core.operations import Action, OperationState, checked
from tickwork.core.settings import SchedulerSettings
from tickwork.core.shards import ShardMap
from tickwork.core.spec import JobSpec
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.operations import Operations
from tickwork.engine.scheduler import Scheduler
from tickwork.store.database import Database

SHARDS = 4
DEAD = 50_000
JOBS_PER_SHARD = 10
OUTAGE = "outage"
STEADY = "steady"
ENQUEUE_EVERY = 0.01
SEED = """
INSERT INTO finished_runs (id, tenant, job, queue, priority, state, origin, attempt,
    max_attempts, retry_base, retry_max, timeout_seconds, due_at, ready_at, last_error,
    created_at, updated_at, finished_at)
SELECT nextval('run_ids'), $1, ($2::text[])[1 + i % array_length($2::text[], 1)], 'outage',
       1, 'dead', 'api', 3, 3, 1, 60, 60, $3, $3,
       '{"message": "connection refused"}'::jsonb, $3, $3, $3
FROM generate_series(1, $4) AS i
"""


def _jobs_of(shard_map: ShardMap, shard: int) -> list[str]:
    found = [
        f"export-{n}" for n in range(1000) if shard_map.shard_of(OUTAGE, f"export-{n}") == shard
    ]
    return found[:JOBS_PER_SHARD]


async def _seed(database: Database, per_shard: int) -> None:
    died = datetime.now(UTC) - timedelta(hours=1)
    for shard in range(SHARDS):
        async with database.connection(shard) as conn:
            await conn.execute(SEED, OUTAGE, _jobs_of(database.shard_map, shard), died, per_shard)
            await conn.execute("ANALYZE finished_runs")


class SchedulerThread:
    """A scheduler over every shard in a thread with its own event loop."""

    def __init__(self, shard_map: ShardMap, identity: str) -> None:
        self.shard_map = shard_map
        self.identity = identity
        self.loop = asyncio.new_event_loop()
        self.stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.started = threading.Event()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._run())

    async def _run(self) -> None:
        self.stop = asyncio.Event()
        async with Database(self.shard_map) as database:
            scheduler = Scheduler(
                database,
                SchedulerSettings(interval=0.5),
                ownership=Fixed(range(SHARDS), self.identity),
            )
            self.started.set()
            await scheduler.run(self.stop)

    def start(self) -> None:
        self.thread.start()
        self.started.wait()

    def halt(self) -> None:
        stop = self.stop
        assert stop is not None
        self.loop.call_soon_threadsafe(stop.set)
        self.thread.join()


async def _measure_lag(
    jobs: Jobs, dispatcher: Dispatcher, until: asyncio.Event, lags: list[float]
) -> None:
    """Another tenant's runs: one enqueued every 10 ms, leased by a long-polling worker;
    each run's enqueue → lease time into ``lags``."""
    enqueued: dict[str, float] = {}

    async def producer() -> None:
        while not until.is_set():
            run, _ = await jobs.enqueue(STEADY, "ping", EnqueueRequest(), "bench")
            enqueued[run.run_id] = time.monotonic()
            await asyncio.sleep(ENQUEUE_EVERY)

    async def worker() -> None:
        while not until.is_set():
            leases = await dispatcher.lease(
                [STEADY], limit=10, worker_id="w", lease_seconds=60, tenant=STEADY, wait_seconds=0.5
            )
            now = time.monotonic()
            for lease in leases:
                started = enqueued.pop(lease.run_id, None)
                if started is not None:
                    lags.append(now - started)

    await asyncio.gather(producer(), worker())


def _median_ms(values: list[float]) -> float | None:
    # None (a blank cell) when a phase too short for a lease to finish had no runs.
    return 1000 * statistics.median(values) if values else None


@register("bulk", "a bulk replay of 50 000 dead runs over 4 shards; other tenants' start lag")
async def bulk_replay(context: Context) -> list[Table]:
    shard_map = await context.migrate(SHARDS)
    per_shard = scaled(DEAD // SHARDS, least=1)
    dead_runs = per_shard * SHARDS
    async with Database(shard_map) as database:
        await _seed(database, per_shard)
        jobs = Jobs(database)
        await jobs.put(STEADY, "ping", JobSpec.model_validate({"queue": STEADY}), "bench")
        dispatcher = Dispatcher(database)
        ops = Operations(database)
        first = SchedulerThread(shard_map, "scheduler-a")
        first.start()

        baseline: list[float] = []
        quiet = asyncio.Event()
        measuring = asyncio.create_task(_measure_lag(jobs, dispatcher, quiet, baseline))
        # At least 3 s (enough of the other tenant's runs for a p99), but in a smoke run.
        await asyncio.sleep(context.seconds / 2 if context.smoke else max(3.0, context.seconds / 2))
        quiet.set()
        await measuring

        during: list[float] = []
        done = asyncio.Event()
        measuring = asyncio.create_task(_measure_lag(jobs, dispatcher, done, during))
        began = time.monotonic()
        operation = await ops.create(OUTAGE, Action.replay, checked(action=Action.replay), "bench")
        progress: list[tuple[float, int]] = []
        second: SchedulerThread | None = None
        while True:
            found = await ops.get(OUTAGE, operation.id)
            progress.append((time.monotonic() - began, found.processed))
            if second is None and found.processed >= 0.4 * found.total:
                await asyncio.to_thread(first.halt)  # interrupted mid-way...
                second = SchedulerThread(shard_map, "scheduler-b")  # ...and taken over
                second.start()
            if found.state is not OperationState.running:
                break
            await asyncio.sleep(0.2)
        took = time.monotonic() - began
        done.set()
        await measuring
        if second is not None:
            await asyncio.to_thread(second.halt)
        else:
            await asyncio.to_thread(first.halt)

        ready = dead = audited = 0
        for shard in range(SHARDS):
            async with database.connection(shard) as conn:
                ready += await conn.fetchval(
                    "SELECT count(*) FROM live_runs WHERE tenant = $1", OUTAGE
                )
                dead += await conn.fetchval(
                    "SELECT count(*) FROM finished_runs WHERE tenant = $1 AND state = 'dead'",
                    OUTAGE,
                )
                audited += await conn.fetchval(
                    "SELECT count(*) FROM audit_log WHERE tenant = $1", OUTAGE
                )
    done_state = (OperationState.done, dead_runs, dead_runs)
    assert (found.state, found.total, found.processed) == done_state
    assert (ready, dead, audited) == (dead_runs, 0, 1), (ready, dead, audited)
    p99 = percentile(during, 0.99)
    context.figures["bulk_replay_runs_per_s"] = dead_runs / took
    context.figures["bulk_other_tenant_p99_start_lag_s"] = p99
    rows: list[Row] = [
        {
            "phase": "before the replay",
            "other tenant's runs": len(baseline),
            "start lag p50 ms": _median_ms(baseline),
            "start lag p99 ms": 1000 * percentile(baseline, 0.99),
            "replayed": 0,
            "seconds": 0.0,
        },
        {
            "phase": "during the replay",
            "other tenant's runs": len(during),
            "start lag p50 ms": _median_ms(during),
            "start lag p99 ms": 1000 * p99,
            "replayed": found.processed,
            "seconds": took,
        },
    ]
    halfway = next((at for at, n in progress if n >= dead_runs // 2), took)
    return [
        Table(
            f"bulk replay: {dead_runs:,} dead runs over {SHARDS} shards, interrupted at 40 % "
            "and resumed",
            rows,
            notes=(
                f"{dead_runs / took:,.0f} runs/s; half done after {halfway:.1f} s; "
                f"ready {ready:,}, still dead {dead}, audit entries {audited}",
                "other tenant: one run every 10 ms, one long-polling worker; target p99 < 1 s",
            ),
        )
    ]
