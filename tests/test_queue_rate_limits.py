"""Queue-wide rate limits set on the dispatcher (``--queue-rate-limit``): the window on
the queue's home shard holds across tenants, shards and dispatcher replicas; other
queues are claimed as before; a home shard that cannot be read closes the queue. Time
is the claims' ``now``, driven by the test. The option's refusals are checked in
tests/unit/test_queue_rate_limits.py."""

from __future__ import annotations

import asyncio
import itertools

import orjson
import pytest
from claim_timing import TickingClock, fullest_window

from tickwork.core.clock import FrozenClock
from tickwork.core.queue_limits import QueueRateLimit
from tickwork.core.records import Lease, Outcome
from tickwork.core.shards import Shard, ShardMap
from tickwork.core.spec import JobSpec, parse
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.engine.jobs import Jobs
from tickwork.engine.metrics import Metrics
from tickwork.store import queue_rates
from tickwork.store.database import Database

REPORTS = "reports"


async def _job(jobs: Jobs, tenant: str, name: str, queue: str, runs: int) -> None:
    await jobs.put(tenant, name, parse(JobSpec, {"queue": queue}), "test")
    payloads = [orjson.dumps({"n": n}) for n in range(runs)]
    assert await jobs.enqueue_ready(tenant, name, payloads, "test") is not None


def _names_on_distinct_shards(jobs: Jobs, tenant: str, count: int, avoid: int = -1) -> list[str]:
    found: dict[int, str] = {}
    for name in (f"job-{n}" for n in itertools.count()):
        shard = jobs.shard_of(tenant, name)
        if shard != avoid and shard not in found:
            found[shard] = name
        if len(found) == count:
            return list(found.values())
    raise AssertionError("unreachable")


async def test_a_queue_limit_holds_across_tenants_shards_and_two_dispatchers(
    shard_map: ShardMap, clock: FrozenClock
) -> None:
    limit, period = 10, 1.0
    rates = {REPORTS: QueueRateLimit(REPORTS, limit, period)}
    async with Database(shard_map) as first, Database(shard_map) as second:
        jobs = Jobs(first, clock)
        # The queue's runs on three shards, of two tenants; a plain queue beside it.
        placed = set()
        for tenant in ("acme", "globex"):
            for name in _names_on_distinct_shards(jobs, tenant, 2):
                placed.add(jobs.shard_of(tenant, name))
                await _job(jobs, tenant, name, REPORTS, 50)
        assert len(placed) >= 2
        await _job(jobs, "acme", "plain", "default", 100)
        ticking = TickingClock(clock.now(), 0.008)
        metrics = Metrics()
        dispatchers = [
            Dispatcher(
                db,
                ticking,
                queue_rates=rates,
                queue_held_back=lambda queue: metrics.queue_rate_limited.labels(queue).inc(),
            )
            for db in (first, second)
        ]
        granted: list[Lease] = []

        async def claimer(dispatcher: Dispatcher, worker: str) -> None:
            for _ in range(5000):
                if sum(g.queue == REPORTS for g in granted) == 200:
                    return
                got = await dispatcher.lease(
                    [REPORTS, "default"], limit=7, worker_id=worker, lease_seconds=60
                )
                granted.extend(got)
                if got:
                    await dispatcher.complete(
                        [CompleteItem(g.run_id, g.fencing_token, Outcome.succeeded) for g in got]
                    )

        await asyncio.gather(
            *(
                claimer(dispatcher, f"w{n}-{d}")
                for d, dispatcher in enumerate(dispatchers)
                for n in range(2)
            )
        )
    reports = [g.leased_at.timestamp() for g in granted if g.queue == REPORTS]
    plain = [g.leased_at.timestamp() for g in granted if g.queue == "default"]
    assert len(reports) == len({g.run_id for g in granted if g.queue == REPORTS}) == 200
    assert fullest_window(reports, period) <= limit
    # The limit is used (200 runs at 10 a second: about 20 seconds), and it never held
    # back the plain queue, drained long before.
    assert max(reports) - min(reports) < 200 / limit * period * 1.25
    assert len(plain) == 100
    assert max(plain) - min(reports) < 3 * period
    held = metrics.registry.get_sample_value(
        "tickwork_queue_rate_limited_total", {"queue": REPORTS}
    )
    assert held is not None and held > 0


async def test_unused_leases_go_back_to_the_window(database: Database, clock: FrozenClock) -> None:
    jobs = Jobs(database, clock)
    await _job(jobs, "acme", "few", REPORTS, 3)
    dispatcher = Dispatcher(database, clock, queue_rates={REPORTS: QueueRateLimit(REPORTS, 5, 60)})
    # Asked for 50, granted 5, used 3: the 2 left stay in the window for later runs.
    first = await dispatcher.lease([REPORTS], limit=50, worker_id="w", lease_seconds=60)
    assert len(first) == 3
    await _job(jobs, "acme", "more", REPORTS, 5)
    second = await dispatcher.lease([REPORTS], limit=50, worker_id="w", lease_seconds=60)
    assert len(second) == 2
    assert await dispatcher.lease([REPORTS], limit=50, worker_id="w", lease_seconds=60) == []
    # A period later the window has room again.
    clock.advance(61)
    third = await dispatcher.lease([REPORTS], limit=50, worker_id="w", lease_seconds=60)
    assert len(third) == 3


async def test_a_queue_whose_home_shard_is_down_waits_while_other_queues_are_claimed(
    shard_map: ShardMap, database: Database, clock: FrozenClock
) -> None:
    home = shard_map.shard_of(queue_rates.TENANT, queue_rates.window_key(REPORTS))
    jobs = Jobs(database, clock)
    [reports, plain] = _names_on_distinct_shards(jobs, "acme", 2, avoid=home)
    await _job(jobs, "acme", reports, REPORTS, 3)
    await _job(jobs, "acme", plain, "default", 3)
    broken = ShardMap(
        tuple(
            Shard(s.number, "postgresql://127.0.0.1:1/nothing" if s.number == home else s.dsn)
            for s in shard_map.shards
        )
    )
    rates = {REPORTS: QueueRateLimit(REPORTS, 100, 60)}
    async with Database(broken) as cut_off:
        dispatcher = Dispatcher(cut_off, clock, queue_rates=rates)
        got = await dispatcher.lease(
            [REPORTS, "default"], limit=10, worker_id="w", lease_seconds=60
        )
        assert sorted(g.queue for g in got) == ["default"] * 3
        # Only the closed queue asked for: the store cannot serve it (503 to a worker).
        with pytest.raises(Exception, match="rate window of queue 'reports'"):
            await dispatcher.lease([REPORTS], limit=10, worker_id="w", lease_seconds=60)
    shard = jobs.shard_of("acme", reports)
    async with database.connection(shard) as conn:
        waiting = await conn.fetch(
            "SELECT attempt FROM live_runs WHERE job = $1 AND state = 'ready'", reports
        )
    assert [row["attempt"] for row in waiting] == [0, 0, 0]
    # Back up: the queue's runs are claimed.
    dispatcher = Dispatcher(database, clock, queue_rates=rates)
    again = await dispatcher.lease([REPORTS], limit=10, worker_id="w", lease_seconds=60)
    assert len(again) == 3


async def test_a_claim_without_limited_queues_never_reads_a_window(
    database: Database, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = Jobs(database, clock)
    await _job(jobs, "acme", "plain", "default", 2)
    dispatcher = Dispatcher(database, clock, queue_rates={REPORTS: QueueRateLimit(REPORTS, 1, 60)})

    async def refuse(*args: object) -> None:
        raise AssertionError("a window was read for a queue without a limit")

    monkeypatch.setattr(queue_rates, "take", refuse)
    got = await dispatcher.lease(["default"], limit=10, worker_id="w", lease_seconds=60)
    assert len(got) == 2
