"""Races between real clients, each on its own PostgreSQL connection.

What must hold however the statements interleave: a run is leased once per attempt, a
fencing token belongs to one lease only, a run's tokens increase from attempt to
attempt, and a worker that lost its lease (or raced the reaper and lost) changes
nothing. Time is pinned with ``now=`` wherever an expiry matters; the drain tests use
the database clock and 30 s leases that never expire while they run.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from polling import eventually

from tickwork.core.errors import StaleLease, TickworkError
from tickwork.core.records import (
    Beat,
    Completed,
    Completion,
    Extended,
    Lease,
    Origin,
    Outcome,
    State,
)
from tickwork.core.shards import Shard, ShardMap
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.store import database as db
from tickwork.store import leases, runs, sweeps
from tickwork.store.database import Database, PoolSettings

QUEUES = ["default"]
T0 = datetime(2026, 3, 15, 1, 0, tzinfo=UTC)


def later(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def preload(
    conn: asyncpg.Connection, count: int, *, max_attempts: int = 3, now: datetime | None = None
) -> None:
    """``count`` ready runs (immediate retries) spread over a few tenants and jobs."""
    await conn.executemany(
        runs.SQL.insert_run,
        [
            (
                f"tenant-{i % 5}",
                f"job-{i % 17}",
                "default",
                i % 3,
                Origin.api.value,
                max_attempts,
                0.0,
                0.0,
                3600,
                None,
                None,
                None,
                None,
                None,
                now,
                0,  # no concurrency limit
                None,  # no request fingerprint: no idempotency key
                False,  # not a dry run
                None,  # no audit entry
            )
            for i in range(count)
        ],
    )


@dataclass(frozen=True)
class Granted:
    run: str
    attempt: int
    token: int
    worker: str


def check_leases(granted: Sequence[Granted]) -> dict[str, list[Granted]]:
    """Each (run, attempt) leased once, tokens unique, a run's tokens increasing."""
    pairs = collections.Counter((g.run, g.attempt) for g in granted)
    assert [p for p, n in pairs.items() if n > 1] == []
    tokens = collections.Counter((g.run.split("-")[0], g.token) for g in granted)
    assert [t for t, n in tokens.items() if n > 1] == []
    per_run: dict[str, list[Granted]] = collections.defaultdict(list)
    for g in granted:
        per_run[g.run].append(g)
    for history in per_run.values():
        history.sort(key=lambda g: g.attempt)
        assert [g.attempt for g in history] == list(range(1, len(history) + 1))
        assert all(a.token < b.token for a, b in itertools.pairwise(history))
    return per_run


def fails_first_attempt(run_id: int) -> bool:
    return run_id % 4 == 0


def outcome_of(run_id: int, attempt: int) -> Outcome:
    """What a drain's worker reports: a quarter of the runs fail their first attempt."""
    if attempt == 1 and fails_first_attempt(run_id):
        return Outcome.failed
    return Outcome.succeeded


@dataclass
class Drain:
    """What a drain's workers saw; ``done`` is set once ``total`` runs succeeded or at
    the first refused completion."""

    total: int
    granted: list[Granted] = field(default_factory=list)
    refused: list[TickworkError] = field(default_factory=list)
    finished: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def tally(self, answers: Sequence[Completed | TickworkError]) -> None:
        for answer in answers:
            if not isinstance(answer, Completed):
                self.refused.append(answer)
            elif answer.state is State.succeeded:
                self.finished += 1
        if self.finished >= self.total or self.refused:
            self.done.set()

    async def promote(self, shards: Sequence[Shard]) -> None:
        """Promote due retries on every shard until the drain is done."""
        conns = [await db.connect(s) for s in shards]
        try:
            while not self.done.is_set():
                promoted = 0
                for conn in conns:
                    promoted += (await sweeps.promote_due(conn)).ready
                if not promoted:
                    await asyncio.sleep(0.005)
        finally:
            for conn in conns:
                await conn.close()

    def check(self) -> dict[str, list[Granted]]:
        """Nothing refused, every run succeeded once: the leases per run."""
        assert self.refused == []
        assert self.finished == self.total
        per_run = check_leases(self.granted)
        assert len(per_run) == self.total
        return per_run


async def test_drain_5000_runs_on_one_shard_with_8_claimers(shard_map: ShardMap) -> None:
    shard = shard_map[0]
    total = 5000
    setup = await db.connect(shard)
    await preload(setup, total)
    ids = [r["id"] for r in await setup.fetch("SELECT id FROM runs")]
    retried = sum(1 for i in ids if fails_first_attempt(i))
    assert 0 < retried < total

    drain = Drain(total)
    granted = drain.granted
    batches = [1, 3, 5, 10, 10, 25, 50, 100]

    async def claimer(number: int) -> None:
        conn = await db.connect(shard)
        worker = f"w{number}"
        try:
            while not drain.done.is_set():
                got = await leases.claim(conn, 0, QUEUES, batches[number], worker, 30)
                if not got:
                    await asyncio.sleep(0.002)
                    continue
                granted.extend(
                    Granted(f"r0-{x.id}", x.attempt, x.fencing_token, worker) for x in got
                )
                completions = [
                    Completion(x.id, x.fencing_token, outcome_of(x.id, x.attempt)) for x in got
                ]
                drain.tally(await leases.complete(conn, 0, completions))
        finally:
            await conn.close()

    try:
        claimers = (claimer(n) for n in range(len(batches)))
        # A bound for a hang, not a latency claim (make bench measures throughput).
        await asyncio.wait_for(asyncio.gather(drain.promote([shard]), *claimers), 25)
        drain.check()
        assert len(granted) == total + retried
        assert len({g.worker for g in granted}) >= 2  # they did run concurrently

        states = await setup.fetch("SELECT state, count(*) FROM runs GROUP BY state")
        assert {r["state"]: r["count"] for r in states} == {"succeeded": total}
        rows = await setup.fetch("SELECT run_id, attempt, fencing_token, outcome FROM run_attempts")
        assert len(rows) == len(granted)
        recorded = {(f"r0-{r['run_id']}", r["attempt"], r["fencing_token"]) for r in rows}
        assert recorded == {(g.run, g.attempt, g.token) for g in granted}
    finally:
        await setup.close()


async def test_drain_every_shard_through_separate_dispatchers(shard_map: ShardMap) -> None:
    per_shard = 500
    for shard in shard_map.shards:
        conn = await db.connect(shard)
        try:
            await preload(conn, per_shard)
        finally:
            await conn.close()
    total = per_shard * shard_map.count

    drain = Drain(total)

    async def worker(number: int) -> None:
        name = f"w{number}"
        settings = PoolSettings(min_size=1, max_size=1)
        async with Database(shard_map, settings) as own:
            dispatcher = Dispatcher(own, rng=random.Random(number))
            while not drain.done.is_set():
                got = await dispatcher.lease(
                    QUEUES, limit=1 + number * 3, worker_id=name, lease_seconds=30
                )
                if not got:
                    await asyncio.sleep(0.002)
                    continue
                drain.granted.extend(
                    Granted(x.run_id, x.attempt, x.fencing_token, name) for x in got
                )
                items = [
                    CompleteItem(x.run_id, x.fencing_token, outcome_of(x.id, x.attempt))
                    for x in got
                ]
                drain.tally(await dispatcher.complete(items))

    workers = (worker(n) for n in range(8))
    await asyncio.wait_for(asyncio.gather(drain.promote(shard_map.shards), *workers), 25)
    per_run = drain.check()
    assert {run.split("-")[0] for run in per_run} == {f"r{n}" for n in range(shard_map.count)}


# --- a slow worker past its lease ------------------------------------------------------


@contextlib.asynccontextmanager
async def connections(shard: Shard, count: int) -> AsyncIterator[list[asyncpg.Connection]]:
    """``count`` connections of their own to ``shard``, closed afterwards."""
    opened = [await db.connect(shard) for _ in range(count)]
    try:
        yield opened
    finally:
        for conn in opened:
            await conn.close()


async def snapshot(conn: asyncpg.Connection, run_id: int) -> tuple[Any, ...]:
    row = await conn.fetchrow("SELECT * FROM runs WHERE id = $1", run_id)
    history = await conn.fetch(
        "SELECT * FROM run_attempts WHERE run_id = $1 ORDER BY fencing_token", run_id
    )
    return dict(row or {}), [dict(r) for r in history]


async def test_slow_worker_loses_its_lease_to_the_next_holder(shard_map: ShardMap) -> None:
    shard = shard_map[1]
    async with connections(shard, 3) as (slow, fast, scheduler):
        await preload(slow, 1, now=T0)
        [old] = await leases.claim(slow, 1, QUEUES, 1, "slow", 30, now=T0)
        [beat] = await leases.heartbeat(slow, 1, [Beat(old.id, old.fencing_token, 30)], later(20))
        assert isinstance(beat, Extended) and beat.lease_expires_at == later(50)

        # The slow worker goes quiet; its lease expires and goes to someone else.
        assert (await sweeps.reap(scheduler, now=later(49))).total == 0
        assert (await sweeps.reap(scheduler, now=later(50))).retried == 1
        assert (await sweeps.promote_due(scheduler, now=later(50))).ready == 1
        [new] = await leases.claim(fast, 1, QUEUES, 1, "fast", 30, now=later(51))
        assert new.id == old.id
        assert new.attempt == 2 and new.fencing_token > old.fencing_token

        before = await snapshot(scheduler, old.id)
        [beat] = await leases.heartbeat(slow, 1, [Beat(old.id, old.fencing_token, 30)], later(52))
        assert isinstance(beat, StaleLease)
        for outcome in Outcome:
            [answer] = await leases.complete(
                slow, 1, [Completion(old.id, old.fencing_token, outcome)], later(53)
            )
            assert isinstance(answer, StaleLease)
        assert await snapshot(scheduler, old.id) == before

        [beat] = await leases.heartbeat(fast, 1, [Beat(new.id, new.fencing_token, 30)], later(60))
        assert isinstance(beat, Extended) and beat.lease_expires_at == later(90)
        [answer] = await leases.complete(
            fast, 1, [Completion(new.id, new.fencing_token, Outcome.succeeded)], later(61)
        )
        assert answer == Completed(new.id, State.succeeded, None)
        [late] = await leases.complete(
            slow, 1, [Completion(old.id, old.fencing_token, Outcome.succeeded)], later(62)
        )
        assert isinstance(late, StaleLease)

        _, history = await snapshot(scheduler, old.id)
        assert [(h["worker_id"], h["outcome"]) for h in history] == [
            ("slow", "lease-expired"),
            ("fast", "succeeded"),
        ]


# --- completion racing the reaper ------------------------------------------------------


async def leased_runs(conn: asyncpg.Connection, shard: int, count: int) -> list[Lease]:
    """``count`` runs leased at T0 for 30 s (so expired from T0 + 30 s)."""
    await preload(conn, count, now=T0)
    granted: list[Lease] = []
    while len(granted) < count:
        granted += await leases.claim(
            conn, shard, QUEUES, min(100, count - len(granted)), "worker", 30, now=T0
        )
    return granted


async def wait_until_blocked(observer: asyncpg.Connection, pid: int) -> None:
    async def waiting() -> bool:
        return bool(
            await observer.fetchval(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid
            )
        )

    await eventually(waiting, every=0.01, what="the completion waiting for the reaper's lock")


@pytest.mark.parametrize("outcome", [Outcome.succeeded, Outcome.failed])
async def test_reaper_first_then_completion_is_stale(shard_map: ShardMap, outcome: Outcome) -> None:
    shard = shard_map[2]
    async with connections(shard, 3) as (reaper, worker, observer):
        [lease] = await leased_runs(worker, 2, 1)
        holding = reaper.transaction()
        await holding.start()
        assert (await sweeps.reap(reaper, now=later(60))).retried == 1
        completing = asyncio.create_task(
            leases.complete(
                worker, 2, [Completion(lease.id, lease.fencing_token, outcome)], later(60)
            )
        )
        await wait_until_blocked(observer, worker.get_server_pid())
        await holding.commit()
        [answer] = await completing
        assert isinstance(answer, StaleLease)
        row, history = await snapshot(observer, lease.id)
        assert row["state"] == State.retry_wait.value
        assert [h["outcome"] for h in history] == ["lease-expired"]


@pytest.mark.parametrize("outcome", [Outcome.succeeded, Outcome.failed])
async def test_completion_first_then_the_reaper_skips_it(
    shard_map: ShardMap, outcome: Outcome
) -> None:
    shard = shard_map[2]
    async with connections(shard, 3) as (reaper, worker, observer):
        [lease] = await leased_runs(worker, 2, 1)
        holding = worker.transaction()
        await holding.start()
        [answer] = await leases.complete(
            worker, 2, [Completion(lease.id, lease.fencing_token, outcome)], later(60)
        )
        assert isinstance(answer, Completed)
        # The reaper does not wait for the worker's lock, and takes nothing.
        assert (await asyncio.wait_for(sweeps.reap(reaper, now=later(60)), 5)).total == 0
        await holding.commit()
        assert (await sweeps.reap(reaper, now=later(61))).total == 0
        row, history = await snapshot(observer, lease.id)
        assert row["state"] == answer.state.value
        assert [h["outcome"] for h in history] == [outcome.value]


async def test_completions_racing_the_reaper_have_exactly_one_winner(
    shard_map: ShardMap,
) -> None:
    shard = shard_map[3]
    count = 400
    setup = await db.connect(shard)
    granted = await leased_runs(setup, 3, count)
    rng = random.Random(20260315)
    rng.shuffle(granted)
    outcomes = {x.id: rng.choice(list(Outcome)) for x in granted}
    answers: dict[int, Completed | TickworkError] = {}
    reaped = 0

    async def complete_share(share: list[Lease]) -> None:
        conn = await db.connect(shard)
        try:
            position = 0
            while position < len(share):
                size = rng.randint(1, 8)
                batch = share[position : position + size]
                position += size
                results = await leases.complete(
                    conn,
                    3,
                    [Completion(x.id, x.fencing_token, outcomes[x.id]) for x in batch],
                    later(60),
                )
                answers.update({x.id: r for x, r in zip(batch, results, strict=True)})
        finally:
            await conn.close()

    async def reaper() -> None:
        nonlocal reaped
        conn = await db.connect(shard)
        try:
            while True:
                done = await sweeps.reap(conn, limit=5, now=later(60))
                reaped += done.total
                if done.total == 0 and len(answers) == count:
                    return
                if done.total == 0:
                    await asyncio.sleep(0.001)
        finally:
            await conn.close()

    try:
        shares = [granted[i::4] for i in range(4)]
        await asyncio.wait_for(
            asyncio.gather(reaper(), reaper(), *(complete_share(s) for s in shares)), 20
        )
        rows = {
            r["id"]: r["state"]
            for r in await setup.fetch("SELECT id, state FROM runs WHERE state <> 'ready'")
        }
        history = collections.defaultdict(list)
        for r in await setup.fetch("SELECT run_id, outcome, result_state FROM run_attempts"):
            history[r["run_id"]].append((r["outcome"], r["result_state"]))
        won_by_worker = 0
        for lease in granted:
            answer = answers[lease.id]
            [(outcome, result_state)] = history[lease.id]  # one attempt, one record
            assert rows[lease.id] == result_state
            if isinstance(answer, Completed):
                won_by_worker += 1
                assert outcome == outcomes[lease.id].value
                assert answer.state.value == result_state
            else:
                assert isinstance(answer, StaleLease)
                assert outcome == "lease-expired"
                assert result_state == State.retry_wait.value
        assert won_by_worker + reaped == count
    finally:
        await setup.close()
