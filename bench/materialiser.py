"""The materialiser: a fleet due in the same minute, and passes when nothing is due.

``materialise``: N definitions (default 100 000) on ``0 * * * *`` with 60 s jitter, all
due in the same minute, spread over the shards. One process runs ``materialise_all``
over every shard in turn, as a scheduler pass does, and the runs inserted per second
are reported; then the injected clock moves one second at a time calling
``promote_due`` on every shard until every run is ``ready``, and both the simulated
seconds and the wall time that took are reported. A profile of one more materialise
run shows where the time goes, and ``plan()`` is timed on its own.

``materialise-idle``: one materialiser pass over every shard when none of N
definitions is due (default 0, 100 000 and 1 000 000; ``next_due_at`` far ahead). The
``definitions_due`` index should keep it flat in N.

``TICKWORK_BENCH_SCALE`` (default 1) multiplies every N: ``TICKWORK_BENCH_SCALE=0.1
python -m bench --only materialise`` for a quick look.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import statistics
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import asyncpg
import orjson

from bench import Context, Row, Table, register
from bench.harness import scaled
from tickwork.core.shards import ShardMap
from tickwork.core.spec import JobSpec, MissedRunPolicy, Schedule
from tickwork.engine import materialiser
from tickwork.store import database, sweeps

SHARDS = 4
DUE_DEFINITIONS = 100_000
IDLE_SIZES = (0, 100_000, 1_000_000)
JITTER_SECONDS = 60
DUE = datetime(2026, 3, 15, 2, 0, tzinfo=UTC)
IDLE_PASSES = 20
PROFILE_DEFINITIONS = 20_000
PLAN_CALLS = 20_000

INSERT_DEFINITIONS = """
INSERT INTO definitions (tenant, name, spec, queue, priority, next_due_at, created_at,
                         updated_at)
SELECT 'tenant-' || (n % 100), 'job-' || $4::integer || '-' || n, $1::jsonb, 'default', 1,
       $2, now(), now()
FROM generate_series(1, $3) AS n
"""


def spec_document(cron: str = "0 * * * *", jitter: int = JITTER_SECONDS) -> str:
    spec = JobSpec(schedule=Schedule(cron=cron, jitter_seconds=jitter))
    return orjson.dumps(spec.to_document()).decode()


async def connect_all(shard_map: ShardMap) -> list[asyncpg.Connection]:
    return [await database.connect(shard) for shard in shard_map.shards]


async def close_all(conns: Sequence[asyncpg.Connection]) -> None:
    for conn in conns:
        await conn.close()


async def fill(
    conns: Sequence[asyncpg.Connection], count: int, next_due_at: datetime, document: str
) -> None:
    """``count`` definitions spread evenly over the shards, then VACUUM ANALYZE."""
    await reset(conns)
    for number, conn in enumerate(conns):
        share = count // len(conns) + (1 if number < count % len(conns) else 0)
        if share:
            await conn.execute(INSERT_DEFINITIONS, document, next_due_at, share, number)
        await conn.execute("VACUUM ANALYZE definitions")


async def reset(conns: Sequence[asyncpg.Connection]) -> None:
    for conn in conns:
        await conn.execute("TRUNCATE definitions, live_runs, finished_runs, run_keys, attempts")


async def materialise_pass(conns: Sequence[asyncpg.Connection], now: datetime) -> int:
    """One materialiser pass over every shard, in turn (as ``Scheduler.tick`` does)."""
    runs = 0
    for conn in conns:
        runs += (await materialiser.materialise_all(conn, now)).runs
    return runs


async def ready_count(conns: Sequence[asyncpg.Connection]) -> int:
    total = 0
    for conn in conns:
        total += await conn.fetchval("SELECT count(*) FROM runs WHERE state = 'ready'")
    return total


@register(
    "materialise",
    "100k definitions due in one minute: runs/s, then time to all ready",
    default=False,
)
async def materialise_fleet(context: Context) -> list[Table]:
    shard_map = await context.migrate(SHARDS)
    conns = await connect_all(shard_map)
    count = scaled(DUE_DEFINITIONS)
    try:
        await fill(conns, count, DUE, spec_document())
        now = DUE - timedelta(seconds=30)  # the pass a lookahead before the minute
        started = time.perf_counter()
        inserted = await materialise_pass(conns, now)
        elapsed = time.perf_counter() - started
        if inserted != count:
            raise RuntimeError(f"materialised {inserted} runs of {count}")

        # Due flips, one simulated second at a time, as the scheduler would make them.
        clock = now
        ready = 0
        first_ready: datetime | None = None
        wall = time.perf_counter()
        while ready < count:
            clock += timedelta(seconds=1)
            for conn in conns:
                ready += (await sweeps.promote_due(conn, 5000, clock)).ready
            if ready and first_ready is None:
                first_ready = clock
            if clock > DUE + timedelta(hours=1):
                raise RuntimeError(f"only {ready} of {count} runs ready after an hour")
        flip_wall = time.perf_counter() - wall
        if await ready_count(conns) != count:
            raise RuntimeError("promote_due counted runs that are not ready")
        assert first_ready is not None

        # The same work with the shards' passes overlapping (one task per shard), to
        # show how much of the sequential pass is Python waiting on PostgreSQL.
        await fill(conns, count, DUE, spec_document())
        materialiser.fire_times.cache_clear()
        started = time.perf_counter()
        together = await asyncio.gather(
            *(materialiser.materialise_all(conn, now) for conn in conns)
        )
        overlapped = time.perf_counter() - started
        if sum(done.runs for done in together) != count:
            raise RuntimeError("the overlapped pass missed runs")

        profile_rows = await profile(conns, scaled(PROFILE_DEFINITIONS))
    finally:
        await close_all(conns)

    throughput = Table(
        f"materialise: {count:,} definitions due in one minute, {SHARDS} shards, "
        "one process (materialise_all per shard, batches of 1000)",
        [
            {
                "shards": "in turn (as a scheduler pass)",
                "runs": inserted,
                "seconds": round(elapsed, 2),
                "runs/s": round(inserted / elapsed),
            },
            {
                "shards": "overlapped (a task each)",
                "runs": count,
                "seconds": round(overlapped, 2),
                "runs/s": round(count / overlapped),
            },
        ],
    )
    flips = Table(
        f"due flip: promote_due on every shard each simulated second, jitter {JITTER_SECONDS} s",
        [
            {
                "runs": count,
                "first ready after dueAt s": (first_ready - DUE).total_seconds(),
                "all ready after dueAt s": (clock - DUE).total_seconds(),
                "simulated s": (clock - now).total_seconds(),
                "wall s": round(flip_wall, 2),
            }
        ],
        notes=["simulated s counts from the materialising pass, a lookahead (30 s) early"],
    )
    where = Table(
        f"where a materialise of {scaled(PROFILE_DEFINITIONS):,} due definitions spends its "
        "time (cProfile, cumulative)",
        profile_rows,
        notes=[
            "cumulative seconds under the profiler (which slows the Python side); the rest",
            "of the total is the per-run loop in materialise() and asyncpg decoding",
        ],
    )
    return [throughput, flips, where, plan_table()]


async def profile(conns: Sequence[asyncpg.Connection], count: int) -> list[Row]:
    """cProfile one materialise of ``count`` due definitions on one shard."""
    conn = conns[0]
    await fill([conn], count, DUE, spec_document())
    materialiser.fire_times.cache_clear()
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    await materialiser.materialise_all(conn, DUE - timedelta(seconds=30))
    profiler.disable()
    total = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    # Stats.stats, the raw table (entry[3]: cumulative seconds), is not in typeshed.
    cumulative: dict[tuple[str, str], float] = {
        (path, function): float(entry[3])
        for (path, _, function), entry in stats.stats.items()  # type: ignore[attr-defined]
    }

    def seconds(function: str, path_end: str = "") -> float:
        return sum(v for (p, f), v in cumulative.items() if f == function and p.endswith(path_end))

    parts = {
        "waiting for PostgreSQL (epoll)": seconds("<method 'poll' of 'select.epoll' objects>"),
        "asyncpg: encode arguments, send": seconds("_do_execute", "connection.py"),
        "plan()": seconds("plan", "materialiser.py"),
        "Due.from_record": seconds("from_record", "materialiser.py"),
        "idempotency_key()": seconds("idempotency_key", "materialiser.py"),
        "jitter_offset()": seconds("jitter_offset", "hashing.py"),
    }
    rows: list[Row] = [
        {"part": name, "seconds": round(value, 3), "share %": round(100 * value / total, 1)}
        for name, value in parts.items()
    ]
    rows.append({"part": "total (profiled)", "seconds": round(total, 3), "share %": 100.0})
    return rows


def plan_table() -> Table:
    """µs per ``plan()`` call: a fleet sharing one schedule and minute (the fire times
    are computed once and shared), and every call at its own instant (no sharing)."""
    rows: list[Row] = []
    for cron, zone in (("0 * * * *", "UTC"), ("*/15 * * * *", "Europe/Berlin")):
        for shared in (True, False):
            materialiser.fire_times.cache_clear()
            calls = scaled(PLAN_CALLS if shared else PLAN_CALLS // 10, least=10)
            due = materialiser.Due(
                "tenant", "job", DUE, cron, zone, JITTER_SECONDS, MissedRunPolicy.run_once, None
            )
            now = DUE - timedelta(seconds=30)
            nows = [now if shared else now + timedelta(microseconds=n) for n in range(calls)]
            started = time.perf_counter()
            for instant in nows:
                materialiser.plan(due, instant)
            elapsed = time.perf_counter() - started
            rows.append(
                {
                    "cron": cron,
                    "zone": zone,
                    "fire times": "shared (one minute)" if shared else "computed each call",
                    "calls": calls,
                    "us/call": round(elapsed / calls * 1e6, 1),
                }
            )
    return Table("plan(): microseconds per call (pure, no database)", rows)


@register(
    "materialise-idle", "one materialiser pass when none of N definitions is due", default=False
)
async def materialise_idle(context: Context) -> list[Table]:
    shard_map = await context.migrate(SHARDS)
    conns = await connect_all(shard_map)
    rows: list[Row] = []
    far = DUE + timedelta(days=365)
    try:
        for size in IDLE_SIZES:
            count = scaled(size)
            started = time.perf_counter()
            await fill(conns, count, far, spec_document())
            filled = time.perf_counter() - started
            await materialise_pass(conns, DUE)  # warm: plans cached, pages in memory
            times = []
            for _ in range(IDLE_PASSES):
                started = time.perf_counter()
                if await materialise_pass(conns, DUE):
                    raise RuntimeError("an idle pass materialised runs")
                times.append(time.perf_counter() - started)
            rows.append(
                {
                    "definitions": count,
                    "pass p50 ms": round(statistics.median(times) * 1000, 2),
                    "pass max ms": round(max(times) * 1000, 2),
                    "fill s": round(filled, 1),
                }
            )
    finally:
        await close_all(conns)
    return [
        Table(
            f"idle materialiser pass over {SHARDS} shards (none due), {IDLE_PASSES} passes each",
            rows,
            notes=["a pass is materialise_all on every shard in turn, one connection each"],
        )
    ]
