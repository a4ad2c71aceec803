"""Flow control at claim time: rate limits (`rateLimit`) and keyed concurrency
(`concurrencyKey`) hold against concurrent claimers on two dispatchers, and the
strategies for runs over a key's limit do what they say. Time is the claims' `now`,
driven by the test: a 10 000-run backlog drains in seconds."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from datetime import timedelta

import orjson
from claim_timing import TickingClock, fullest_window

from tickwork.core import shards
from tickwork.core.clock import FrozenClock
from tickwork.core.records import Completion, Lease, Outcome
from tickwork.core.shards import ShardMap
from tickwork.core.spec import JobSpec, parse
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.engine.jobs import Jobs
from tickwork.store import leases
from tickwork.store.database import Database

QUEUE = "default"


async def _put(jobs: Jobs, name: str, document: dict[str, object]) -> None:
    await jobs.put("acme", name, parse(JobSpec, document), "test")


async def _one_per_key(
    database: Database, clock: FrozenClock, name: str, key: str, strategy: str
) -> Jobs:
    """Job ``name``, one run at a time per value of ``key``; the rest go by ``strategy``."""
    jobs = Jobs(database, clock)
    spec = {"concurrency": 1, "concurrencyKey": {"key": key, "strategy": strategy}}
    await _put(jobs, name, spec)
    return jobs


async def _fill(jobs: Jobs, name: str, payloads: list[object]) -> None:
    for start in range(0, len(payloads), 1000):
        chunk = [orjson.dumps(p) for p in payloads[start : start + 1000]]
        assert await jobs.enqueue_ready("acme", name, chunk, "test") is not None


async def test_a_rate_limit_is_never_exceeded_by_four_claimers_on_two_dispatchers(
    shard_map: ShardMap, clock: FrozenClock
) -> None:
    limit, period = 500, 1.0
    async with Database(shard_map) as first, Database(shard_map) as second:
        jobs = Jobs(first, clock)
        await _put(jobs, "mail", {"rateLimit": {"limit": limit, "periodSeconds": 1}})
        await _fill(jobs, "mail", [{"n": n} for n in range(10_000)])
        # One clock for both replicas, as the database's would be: 50 ms a claim, so
        # each period sees about 20 claims of up to 100 runs, most of them held back.
        ticking = TickingClock(clock.now(), 0.05)
        dispatchers = [Dispatcher(db, ticking) for db in (first, second)]
        granted: list[Lease] = []

        async def claimer(dispatcher: Dispatcher, worker: str) -> None:
            idle = 0
            while idle < 60:  # a few periods with nothing left to lease
                got = await dispatcher.lease([QUEUE], limit=100, worker_id=worker, lease_seconds=60)
                idle = 0 if got else idle + 1
                granted.extend(got)
                if got:
                    answers = await dispatcher.complete(
                        [CompleteItem(g.run_id, g.fencing_token, Outcome.succeeded) for g in got]
                    )
                    assert len(answers) == len(got)

        await asyncio.gather(
            *(
                claimer(dispatcher, f"w{n}-{d}")
                for d, dispatcher in enumerate(dispatchers)
                for n in range(2)
            )
        )
    assert len({g.id for g in granted}) == 10_000
    times = sorted(g.leased_at.timestamp() for g in granted)
    assert fullest_window(times, period) <= limit
    # And the limit is used: the backlog took not much more than 20 periods. The clock
    # ticks per reading, and completions read it too, so how many readings a period
    # holds varies with how the four claimers interleave: a margin of half.
    assert times[-1] - times[0] < 10_000 / limit * period * 1.5


async def test_a_keyed_rate_limit_counts_each_key_apart(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await _put(jobs, "sync", {"rateLimit": {"limit": 2, "periodSeconds": 60, "key": "/customer"}})
    await _fill(jobs, "sync", [{"customer": c} for c in ("a", "b") for _ in range(5)])
    shard = jobs.shard_of("acme", "sync")
    async with database.connection(shard) as conn:
        first = await leases.claim(conn, shard, [QUEUE], 100, "w", 60, clock.now())
        assert Counter(orjson.loads(g.payload_json or "{}")["customer"] for g in first) == {
            "a": 2,
            "b": 2,
        }
        # Held back: still ready, no attempt used, until the window has moved on.
        assert await leases.claim(conn, shard, [QUEUE], 100, "w", 60, clock.advance(59)) == []
        held = await conn.fetch("SELECT attempt FROM live_runs WHERE state = 'ready'")
        assert [row["attempt"] for row in held] == [0] * 6
        later = await leases.claim(conn, shard, [QUEUE], 100, "w", 60, clock.advance(2))
        assert len(later) == 4


async def test_a_claim_with_an_older_now_still_counts_its_whole_window(
    database: Database, clock: FrozenClock
) -> None:
    """Two dispatchers' readings of now arrive out of order: a claim at T+1.2 s must not
    drop the leases of T that a claim at T+0.9 s (its window T-0.1..T+0.9) still holds."""
    jobs = Jobs(database, clock)
    await _put(jobs, "mail", {"rateLimit": {"limit": 10, "periodSeconds": 1}})
    shard = jobs.shard_of("acme", "mail")
    start = clock.now()
    async with database.connection(shard) as conn:
        await _fill(jobs, "mail", [{"n": n} for n in range(10)])
        assert len(await leases.claim(conn, shard, [QUEUE], 100, "w", 60, start)) == 10
        await _fill(jobs, "mail", [{"n": 10}])
        later = start + timedelta(seconds=1.2)
        assert len(await leases.claim(conn, shard, [QUEUE], 100, "w", 60, later)) == 1
        await _fill(jobs, "mail", [{"n": n} for n in range(11, 21)])
        older = start + timedelta(seconds=0.9)
        assert await leases.claim(conn, shard, [QUEUE], 100, "w", 60, older) == []


async def _same_shard_names(jobs: Jobs, count: int) -> list[str]:
    by_shard: dict[int, list[str]] = {}
    for name in (f"job-{n}" for n in itertools.count()):
        group = by_shard.setdefault(jobs.shard_of("acme", name), [])
        group.append(name)
        if len(group) == count:
            return group
    raise AssertionError("unreachable")


async def test_keyed_concurrency_holds_per_key_across_a_group_under_concurrent_claimers(
    shard_map: ShardMap, clock: FrozenClock
) -> None:
    limit = 2
    async with Database(shard_map) as first, Database(shard_map) as second:
        jobs = Jobs(first, clock)
        names = await _same_shard_names(jobs, 2)
        for name in names:
            await _put(
                jobs,
                name,
                {
                    "concurrency": limit,
                    "concurrencyKey": {"key": "/customer", "group": "billing"},
                },
            )
            await _fill(jobs, name, [{"customer": f"c{n % 5}"} for n in range(300)])
        shard = jobs.shard_of("acme", names[0])
        worst: Counter[str] = Counter()
        leased_total = 0

        async def claimer(database: Database, worker: str) -> None:
            nonlocal leased_total
            idle = 0
            while idle < 30:
                async with database.connection(shard) as conn:
                    got = await leases.claim(conn, shard, [QUEUE], 7, worker, 60, clock.now())
                    idle = 0 if got else idle + 1
                    leased_total += len(got)
                    rows = await conn.fetch(
                        "SELECT payload ->> 'customer' AS customer, count(*) AS n FROM live_runs"
                        " WHERE state = 'leased' GROUP BY 1"
                    )
                    for row in rows:
                        worst[row["customer"]] = max(worst[row["customer"]], row["n"])
                    await leases.complete(
                        conn,
                        shard,
                        [Completion(g.id, g.fencing_token, Outcome.succeeded) for g in got[::2]],
                        clock.now(),
                    )
                    # The other half finishes on the next turn: leases stay held meanwhile.
                    await asyncio.sleep(0)
                    await leases.complete(
                        conn,
                        shard,
                        [Completion(g.id, g.fencing_token, Outcome.succeeded) for g in got[1::2]],
                        clock.now(),
                    )

        await asyncio.gather(
            *(claimer(db, f"w{n}-{i}") for i, db in enumerate((first, second)) for n in range(2))
        )
    assert leased_total == 600
    assert set(worst) == {f"c{n}" for n in range(5)}
    assert max(worst.values()) <= limit


async def test_cancel_newest_cancels_the_runs_over_a_keys_limit(
    database: Database, clock: FrozenClock
) -> None:
    jobs = await _one_per_key(database, clock, "deploy", "/env", "CancelNewest")
    await _fill(jobs, "deploy", [{"env": "prod"}, {"env": "prod"}, {"env": "dev"}])
    shard = jobs.shard_of("acme", "deploy")
    async with database.connection(shard) as conn:
        granted = await leases.claim(conn, shard, [QUEUE], 10, "w", 60, clock.now())
        assert sorted(orjson.loads(g.payload_json or "{}")["env"] for g in granted) == [
            "dev",
            "prod",
        ]
        states = await conn.fetch(
            "SELECT payload ->> 'env' AS env, state, last_error ->> 'reason' AS reason"
            " FROM runs ORDER BY id"
        )
    assert [(r["env"], r["state"], r["reason"]) for r in states] == [
        ("prod", "leased", None),
        ("prod", "cancelled", "CancelNewest"),
        ("dev", "leased", None),
    ]


async def test_cancel_running_stops_the_running_run_and_starts_the_newest_after_it(
    database: Database, clock: FrozenClock
) -> None:
    jobs = await _one_per_key(database, clock, "index", "/repo", "CancelRunning")
    shard = jobs.shard_of("acme", "index")
    await _fill(jobs, "index", [{"repo": "r1"}])
    async with database.connection(shard) as conn:
        [running] = await leases.claim(conn, shard, [QUEUE], 10, "w", 60, clock.now())
        await _fill(jobs, "index", [{"repo": "r1", "n": 2}, {"repo": "r1", "n": 3}])
        # The running run is asked to stop; the newest waits for it (the limit holds),
        # the one between is superseded.
        assert await leases.claim(conn, shard, [QUEUE], 10, "w", 60, clock.now()) == []
        rows = await conn.fetch(
            "SELECT id, state, cancel_requested, payload ->> 'n' AS n FROM runs ORDER BY id"
        )
        assert [(r["state"], r["cancel_requested"], r["n"]) for r in rows] == [
            ("leased", True, None),
            ("cancelled", False, "2"),
            ("ready", False, "3"),
        ]
        [beat] = await leases.heartbeat(
            conn, shard, [leases.Beat(running.id, running.fencing_token, 60)], clock.now()
        )
        assert beat.cancel_requested  # type: ignore[union-attr]
        await leases.complete(
            conn,
            shard,
            [Completion(running.id, running.fencing_token, Outcome.succeeded)],
            clock.now(),
        )
        [newest] = await leases.claim(conn, shard, [QUEUE], 10, "w", 60, clock.now())
        assert orjson.loads(newest.payload_json or "{}")["n"] == 3
        assert shards.format_run_id(shard, newest.id) == newest.run_id


async def test_the_plain_path_is_untouched_by_a_rate_limited_job_elsewhere(
    database: Database, clock: FrozenClock
) -> None:
    """Runs of jobs without flow control are claimed as before beside a job held back
    by its rate limit, and carry no flow fields."""
    jobs = Jobs(database, clock)
    names = await _same_shard_names(jobs, 2)
    await _put(jobs, names[0], {"rateLimit": {"limit": 1, "periodSeconds": 3600}})
    await jobs.put("acme", names[1], JobSpec(), "test")
    await _fill(jobs, names[0], [{}] * 3)
    await _fill(jobs, names[1], [{}] * 3)
    shard = jobs.shard_of("acme", names[0])
    async with database.connection(shard) as conn:
        granted = await leases.claim(conn, shard, [QUEUE], 10, "w", 60, clock.now())
        assert Counter(g.job for g in granted) == {names[0]: 1, names[1]: 3}
        plain = await conn.fetch(
            "SELECT concurrency, rate_key FROM live_runs WHERE job = $1", names[1]
        )
        assert {(r["concurrency"], r["rate_key"]) for r in plain} == {(0, None)}
        assert (
            await leases.claim(conn, shard, [QUEUE], 10, "w", 60, clock.now() + timedelta(1))
        ) != []
