"""End to end through HTTP: a ``tickwork dispatcher`` process on 127.0.0.1 and workers
built on the worker SDK, every figure next to its raw-SQL baseline (``bench.ceiling``)
measured just before it on the same server.

(c) lease + complete: 1 and 4 worker processes, concurrency 1 and 100 (so lease
    batches of 1 and up to 100, batched completions), a no-op handler.
(d) batch enqueue: ``POST /v1/jobs/{name}/runs:batch`` of 1 000 runs, 2 clients, vs
    ``INSERT … SELECT unnest``; ``--only enqueue`` runs it alone, with the latency of
    a single ``POST /v1/jobs/{name}/runs`` next to a one-row commit.
(e) idle wake-up: an idle worker long-polls; time from the enqueue call to the
    handler starting, p50/p99.
(f) start lag (lease time - ready time) per priority while ready runs arrive at 80 %
    of the throughput measured in (c).
(g) fairness: tenant A floods 100 000 bulk runs of a slow job (concurrency 50, so 50
    workers stay busy with it); tenant B enqueues 10 critical runs per second; B's
    start lag with and without the flood.

``--only http-lease`` runs (c) alone and ``--only http-wakeup`` (e) alone, each with a
dispatcher of its own; ``http`` runs them all, as ``make bench`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from multiprocessing.pool import Pool
from pathlib import Path
from typing import Any, Final

import aiohttp
import asyncpg
import orjson

from bench import Context, Row, Table, ceiling, cpu, harness, register
from bench import wakeup as wakeups
from bench.harness import percentile, scaled
from tickwork.core.shards import ShardMap
from tickwork.store import database
from tickwork.worker import RunContext, RunResult, Worker

SHARDS = 4
QUEUE = "bench"
FLOOD = 100_000
# Lags below this are the dispatcher's own pace (a long-poll answer, a claim), not a
# tenant waiting behind another: the fairness ratio reads both lags as at least this,
# or a p99 of 4 ms against one of 3 ms would read as a 33 % loss of fairness.
FAIRNESS_LAG_FLOOR_S: Final = 0.05
# Ready runs preloaded for (c), per second measured, by concurrency (250 000 and 20 000
# at the default 4 s): sized so that the workers do not run out of work; the table's
# runs/s (make bench) is the rate to compare with.
PRELOAD_PER_SECOND: Final = {1: 5_000, 100: 62_500}
PROCESSES = (1, 4)  # worker processes of (c)
WAKEUPS = 200  # samples of (e), and of the one-row commit next to it
LEASE_SECONDS: Final = 60.0  # of (e)'s leases: the claim began this long before expiry
SINGLE_ENQUEUES = 300
ADMIN = "bench-admin-" + secrets.token_hex(8)
TEAM = "bench-team-" + secrets.token_hex(8)
TEAM_A = "bench-team-a-" + secrets.token_hex(8)
TEAM_B = "bench-team-b-" + secrets.token_hex(8)
WORKER = "bench-worker-" + secrets.token_hex(8)
TOKENS = f"""
- {{token: "{ADMIN}", tenant: ops, role: admin}}
- {{token: "{TEAM}", tenant: bench, role: team}}
- {{token: "{TEAM_A}", tenant: a, role: team}}
- {{token: "{TEAM_B}", tenant: b, role: team}}
- {{token: "{WORKER}", tenant: bench, role: worker, queues: ["{QUEUE}"]}}
"""
PRELOAD = """
INSERT INTO live_runs (tenant, job, queue, priority, state, origin, max_attempts,
                       retry_base, retry_max, timeout_seconds, due_at, ready_at,
                       created_at, updated_at, concurrency)
SELECT $3, $4, $2, $5, 'ready', 'api', 3, 1, 10, 3600, now(), now(), now(), now(), $6
FROM generate_series(1, $1)
"""
CLEAR = "TRUNCATE live_runs, finished_runs, attempts, run_keys, audit_log"
NOTIFY = "SELECT pg_notify('tickwork_ready', current_schema() || ' ' || $1)"
START_LAGS = """
SELECT r.priority, a.leased_at - r.ready_at AS lag
FROM run_attempts AS a
JOIN finished_runs AS r ON r.id = a.run_id
WHERE a.attempt = 1 AND r.tenant = $1 AND r.job = ANY($2::text[])
  AND r.ready_at >= (SELECT min(ready_at) FROM runs WHERE tenant = $1)
                    + make_interval(secs => $3)
"""
# The feeder of (f): ready runs of the three priorities (20/30/50 %), as a scheduler's
# due flip makes them.
FEED = """
INSERT INTO live_runs (tenant, job, queue, priority, state, origin, max_attempts,
                       retry_base, retry_max, timeout_seconds, due_at, ready_at,
                       created_at, updated_at)
SELECT 'bench', 'lag', $2,
       CASE WHEN g % 10 < 2 THEN 0 WHEN g % 10 < 5 THEN 1 ELSE 2 END, 'ready', 'api', 3,
       1, 10, 3600, now(), now(), now(), now()
FROM generate_series(1, $1) AS g
"""


@contextlib.contextmanager
def dispatcher(database_url: str) -> Iterator[str]:
    """A ``tickwork dispatcher`` process on 127.0.0.1 (quotas out of the way); yields
    its URL."""
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-"))
    try:
        with _dispatcher_in(folder, database_url) as url:
            yield url
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# The PID of each running bench dispatcher, by URL (for bench.cpu).
DISPATCHERS: dict[str, int] = {}


@contextlib.contextmanager
def _dispatcher_in(folder: Path, database_url: str) -> Iterator[str]:
    tokens = folder / "tokens.yaml"
    tokens.write_text(TOKENS)
    port = harness.free_port()
    process = subprocess.Popen(  # noqa: S603 - our own CLI
        [
            sys.executable,
            "-m",
            "tickwork",
            "dispatcher",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--shards",
            str(SHARDS),
            "--tokens",
            str(tokens),
            "--enqueue-rate",
            "1e9",
            "--enqueue-burst",
            "1e9",
            "--max-pending-runs",
            "100000000",
        ],
        env={**os.environ, "TICKWORK_DATABASE_URL": database_url, "TICKWORK_LOG_LEVEL": "WARNING"},
    )
    url = f"http://127.0.0.1:{port}"
    DISPATCHERS[url] = process.pid
    try:
        harness.wait_for_port(process, port, "the dispatcher")
        yield url
    finally:
        DISPATCHERS.pop(url, None)
        process.terminate()
        process.wait(timeout=20)


async def migrate(database_url: str) -> ShardMap:
    from tickwork.store import migrate as migrations

    shard_map = ShardMap.from_dsns([database_url], SHARDS)
    await migrations.migrate_all(shard_map.shards)
    return shard_map


async def _connect_all(shard_map: ShardMap) -> list[asyncpg.Connection]:
    return [await database.connect(shard) for shard in shard_map.shards]


async def clear(shard_map: ShardMap) -> None:
    for conn in await _connect_all(shard_map):
        await conn.execute(CLEAR)
        await conn.close()


async def preload(
    shard_map: ShardMap,
    runs: int,
    *,
    tenant: str = "bench",
    job: str = "job",
    priority: int = 1,
    concurrency: int = 0,
    everywhere: bool = True,
) -> None:
    """``runs`` ready runs: spread over every shard, or on the job's own shard."""
    targets = list(shard_map.shards) if everywhere else [shard_map[shard_map.shard_of(tenant, job)]]
    for shard in targets:
        conn = await database.connect(shard)
        try:
            await conn.execute(
                PRELOAD, runs // len(targets) + 1, QUEUE, tenant, job, priority, concurrency
            )
            await conn.execute("VACUUM ANALYZE live_runs")
        finally:
            await conn.close()


# --- (c) lease + complete through the SDK --------------------------------------------


async def _sdk_rate(
    url: str, concurrency: int, seconds: float, token: str = WORKER, queue: str = QUEUE
) -> tuple[int, float, float]:
    """Runs completed in ``seconds`` after a warm-up, and the wall-clock times
    (``time.time()``) the count ran between."""
    done = 0

    def count(result: RunResult) -> None:
        nonlocal done
        if result.state == "succeeded":
            done += 1

    worker = Worker(
        url,
        token,
        queues=[queue],
        concurrency=concurrency,
        lease_seconds=120,
        wait_seconds=1,
        on_result=count,
    )
    worker.register(lambda _context: None)
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(0.5)  # warm up: connections, first batches
    before = done
    began = time.time()
    await asyncio.sleep(seconds)
    counted = done - before
    ended = time.time()
    worker.stop(force=True)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(task, 30)
    return counted, began, ended


def sdk_process(args: tuple[Any, ...]) -> tuple[int, float, float]:
    return asyncio.run(_sdk_rate(*args))


def sdk_pool() -> Pool:
    """Processes for the worker SDK, spawned (a fresh interpreter each, as a worker's).
    A measurement counts from the moment they lease, so one pool serves several."""
    return multiprocessing.get_context("spawn").Pool(max(PROCESSES))


def sdk_rate(
    pool: Pool, url: str, concurrency: int, processes: int, seconds: float
) -> tuple[float, float, float]:
    """Runs/s of ``processes`` worker processes of ``pool`` together, and the window
    (wall-clock) in which all of them were counting."""
    # The token goes along: a spawned process draws its own random ones at import.
    results = pool.map(sdk_process, [(url, concurrency, seconds, WORKER, QUEUE)] * processes)
    counts = sum(count for count, _began, _ended in results)
    return counts / seconds, max(r[1] for r in results), min(r[2] for r in results)


# The CPU columns of (c): who spends what per run (see bench.cpu).
LEASE_CPU: Final = {
    "postgres": "PG us/run",
    "dispatcher": "dispatcher us/run",
    "workers": "workers us/run",
}


def lease_complete(
    pool: Pool, url: str, database_url: str, shard_map: ShardMap, seconds: float
) -> list[Row]:
    rows: list[Row] = []
    postgres = asyncio.run(cpu.postmaster(database_url))
    for concurrency in (1, 100):
        for processes in PROCESSES:
            asyncio.run(clear(shard_map))
            asyncio.run(preload(shard_map, round(PRELOAD_PER_SECOND[concurrency] * seconds)))
            base, ceiling_pg = asyncio.run(
                ceiling.claim_complete_metered(database_url, seconds / 2, postgres)
            )
            with cpu.metered(
                {
                    "postgres": [postgres],
                    "dispatcher": [DISPATCHERS.get(url)],
                    "workers": [os.getpid()],
                },
                {"bench": os.getpid()},
            ) as meter:
                rate, start, end = sdk_rate(pool, url, concurrency, processes, seconds)
            rows.append(
                {
                    "worker processes": processes,
                    "concurrency (lease batch)": concurrency,
                    "http runs/s": round(rate),
                    "ceiling runs/s": round(base),
                    "vs ceiling": round(rate / base, 2),
                    **cpu.per_run(meter, start, end, rate, LEASE_CPU),
                    "ceiling PG us/run": ceiling_pg,
                }
            )
    return rows


# --- (d) batch enqueue ------------------------------------------------------------------


async def put_job(
    session: aiohttp.ClientSession, url: str, name: str, spec: dict[str, Any]
) -> None:
    async with session.put(f"{url}/v1/jobs/{name}", data=orjson.dumps(spec)) as response:
        if response.status not in (200, 201):
            raise RuntimeError(f"PUT job {name}: {response.status} {await response.text()}")


def api_session(token: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    )


async def batch_enqueue(url: str, seconds: float, clients: int = 2) -> float:
    body = orjson.dumps({"runs": [{"payload": {"n": n}} for n in range(1000)]})
    async with api_session(TEAM) as session:
        await put_job(session, url, "sink", {"queue": "sink"})

        async def loop(deadline: float) -> int:
            done = 0
            while time.perf_counter() < deadline:
                async with session.post(f"{url}/v1/jobs/sink/runs:batch", data=body) as answer:
                    if answer.status != 200:
                        raise RuntimeError(f"batch enqueue: {answer.status} {await answer.text()}")
                    await answer.read()
                done += 1000
            return done

        started = time.perf_counter()
        counts = await asyncio.gather(*(loop(started + seconds) for _ in range(clients)))
        return sum(counts) / (time.perf_counter() - started)


async def single_enqueue(url: str, samples: int = SINGLE_ENQUEUES) -> list[float]:
    """Seconds per ``POST /v1/jobs/{name}/runs`` of one run, one call at a time: the
    first half of every wake-up."""
    body = orjson.dumps({"payload": {"n": 1}})
    async with api_session(TEAM) as session:
        await put_job(session, url, "single", {"queue": "single"})
        times = []
        for n in range(samples + 20):
            sent = time.perf_counter()
            async with session.post(f"{url}/v1/jobs/single/runs", data=body) as answer:
                if answer.status != 201:
                    raise RuntimeError(f"enqueue: {answer.status} {await answer.text()}")
                await answer.read()
            if n >= 20:  # the first few warm the connections and plans
                times.append(time.perf_counter() - sent)
        return times


async def store_enqueue(shard_map: ShardMap, seconds: float, clients: int = 2) -> float:
    """Runs/s of the plain batch's own statement (``runs.insert_ready``, 1 000 runs)
    straight through asyncpg, as many connections as (d) has clients: the database's
    part of (d), without HTTP, parsing, checks or rendering."""
    from tickwork.store import runs

    shard = shard_map.shard_of("bench", "sink")
    payloads: list[bytes | None] = [orjson.dumps({"n": n}) for n in range(1000)]

    async def loop(deadline: float) -> int:
        conn = await database.connect(shard_map[shard])
        done = 0
        try:
            while time.perf_counter() < deadline:
                ready = await runs.insert_ready(conn, shard, "bench", "sink", payloads, "bench")
                assert ready is not None
                done += len(ready.ids)
        finally:
            await conn.close()
        return done

    started = time.perf_counter()
    counts = await asyncio.gather(*(loop(started + seconds) for _ in range(clients)))
    return sum(counts) / (time.perf_counter() - started)


ENQUEUE_NOTES: Final = [
    "us/run: CPU time per run of PostgreSQL's processes, the dispatcher and the bench's "
    "HTTP clients (bench.cpu); baseline PG: PostgreSQL's for INSERT ... unnest",
]


def enqueue_figures(url: str, database_url: str, shard_map: ShardMap, seconds: float) -> Row:
    """(d): the batch enqueue next to ``INSERT … SELECT unnest`` measured just before,
    and the statement it ends in, alone, measured just after."""
    postgres = asyncio.run(cpu.postmaster(database_url))
    asyncio.run(clear(shard_map))
    with cpu.metered({"postgres": [postgres]}, {"bench": os.getpid()}) as meter:
        start = time.time()
        base = asyncio.run(ceiling.enqueue(database_url, seconds / 2))
        base_cpu = cpu.per_run(meter, start, time.time(), base, {"postgres": "PG"})
    with cpu.metered(
        {"postgres": [postgres], "dispatcher": [DISPATCHERS.get(url)]}, {"bench": os.getpid()}
    ) as meter:
        start = time.time()
        rate = asyncio.run(batch_enqueue(url, seconds))
        used = cpu.per_run(
            meter,
            start,
            time.time(),
            rate,
            {"postgres": "PG us/run", "dispatcher": "dispatcher us/run", "bench": "client us/run"},
        )
    asyncio.run(clear(shard_map))
    statement = asyncio.run(store_enqueue(shard_map, seconds / 2))
    return {
        "http runs/s": round(rate),
        "INSERT ... unnest runs/s": round(base),
        "vs baseline": round(rate / base, 2),
        "its statement alone runs/s": round(statement),
        "statement vs baseline": round(statement / base, 2),
        **used,
        "baseline PG us/run": base_cpu["PG"],
    }


@register("enqueue", "(d) alone: HTTP batch and single enqueue", default=False)
def enqueue_case(context: Context) -> list[Table]:
    shard_map = asyncio.run(migrate(context.database_url))
    with dispatcher(context.database_url) as url:
        rows = [enqueue_figures(url, context.database_url, shard_map, context.seconds)]
        asyncio.run(clear(shard_map))
        commits = asyncio.run(ceiling.commit_latency(context.database_url, wakeup_samples()))
        singles = asyncio.run(single_enqueue(url, scaled(SINGLE_ENQUEUES, least=10)))
    figures = context.figures
    figures["enqueue_runs_per_s"] = rows[0]["http runs/s"]
    figures["enqueue_vs_ceiling"] = round(
        rows[0]["http runs/s"] / rows[0]["INSERT ... unnest runs/s"], 3
    )
    figures["single_enqueue_p50_ms"] = round(percentile(singles, 0.5) * 1000, 2)
    figures["single_enqueue_p99_ms"] = round(percentile(singles, 0.99) * 1000, 2)
    return [
        Table(
            "(d) batch enqueue through HTTP (1 000 runs a call, 2 clients)",
            rows,
            notes=ENQUEUE_NOTES,
        ),
        Table(
            "(d) single enqueue through HTTP, one call at a time",
            [
                {
                    "what": "POST /v1/jobs/{name}/runs",
                    "samples": len(singles),
                    "p50 ms": figures["single_enqueue_p50_ms"],
                    "p99 ms": figures["single_enqueue_p99_ms"],
                },
                {
                    "what": "baseline: one-row INSERT + COMMIT",
                    "samples": len(commits),
                    "p50 ms": round(percentile(commits, 0.5) * 1000, 2),
                    "p99 ms": round(percentile(commits, 0.99) * 1000, 2),
                },
            ],
        ),
    ]


# --- (e) idle wake-up -------------------------------------------------------------------


async def wakeup(url: str, samples: int = WAKEUPS) -> list[wakeups.Part]:
    """Seconds from the enqueue call to the handler's start, one run at a time, and
    its three parts (see ``bench.wakeup``)."""
    started: dict[int, tuple[float, float]] = {}
    seen = asyncio.Event()

    async def handle(context: RunContext) -> None:
        # On the event loop: a plain function would run in a thread, and an asyncio
        # Event set from there wakes nobody until the loop next turns.
        expires = context.lease_expires_at
        assert expires is not None  # a leased run's lease has an end
        claimed = expires.timestamp() - LEASE_SECONDS
        started[context.payload["n"]] = (time.time(), claimed)
        seen.set()

    worker = Worker(
        url, ADMIN, queues=["wake"], concurrency=1, wait_seconds=20, lease_seconds=LEASE_SECONDS
    )
    worker.register(handle)
    task = asyncio.create_task(worker.run())
    whole: list[float] = []
    call: list[float] = []
    woken: list[float] = []
    handed: list[float] = []
    try:
        async with api_session(TEAM) as session:
            await put_job(session, url, "wake", {"queue": "wake"})
            await asyncio.sleep(0.5)  # the worker is long-polling now
            for n in range(samples + wakeups.WARM_UP):
                seen.clear()
                sent = time.time()
                body = orjson.dumps({"payload": {"n": n}})
                async with session.post(f"{url}/v1/jobs/wake/runs", data=body) as answer:
                    await answer.read()
                enqueued = time.time()
                await asyncio.wait_for(seen.wait(), 10)
                if n >= wakeups.WARM_UP:
                    handler, claimed = started[n]
                    whole.append(handler - sent)
                    call.append(enqueued - sent)
                    woken.append(claimed - enqueued)
                    handed.append(handler - claimed)
                # Idle again: the worker is back in its long-poll.
                await asyncio.sleep(wakeups.IDLE_SECONDS)
    finally:
        worker.stop(force=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
    return [
        wakeups.Part("tickwork: enqueue call -> handler start", whole),
        wakeups.Part("  enqueue call answered (HTTP, INSERT, commit + NOTIFY)", call),
        wakeups.Part("  answered -> the dispatcher's claim begins (NOTIFY, wake-up)", woken),
        wakeups.Part("  claim begins -> handler start (claim, answer, SDK dispatch)", handed),
    ]


async def lease_calls(url: str, samples: int) -> wakeups.Part:
    """Seconds per ``POST /v1/lease`` of one ready run, answered at once: the claim
    and the answer of a wake-up without its wait, a reference for the last part."""
    async with api_session(TEAM) as session:
        await put_job(session, url, "once", {"queue": "once"})
        runs = orjson.dumps({"runs": [{"payload": {}}] * (samples + wakeups.WARM_UP)})
        async with session.post(f"{url}/v1/jobs/once/runs:batch", data=runs) as answer:
            if answer.status != 200:
                raise RuntimeError(f"batch enqueue: {answer.status} {await answer.text()}")
    lease = orjson.dumps(
        {
            "queues": ["once"],
            "max": 1,
            "waitSeconds": 0,
            "leaseSeconds": LEASE_SECONDS,
            "workerId": "bench-once",
        }
    )
    times = []
    async with api_session(ADMIN) as session:
        for n in range(samples + wakeups.WARM_UP):
            sent = time.perf_counter()
            async with session.post(f"{url}/v1/lease", data=lease) as answer:
                if answer.status != 200:
                    raise RuntimeError(f"lease: {answer.status} {await answer.text()}")
                await answer.read()
            if n >= wakeups.WARM_UP:
                times.append(time.perf_counter() - sent)
    return wakeups.Part("  reference: a lease call answered at once (claim + answer)", times)


def wakeup_samples() -> int:
    """How many wake-ups (and one-row commits) to time: ``WAKEUPS`` at full scale."""
    return scaled(WAKEUPS, least=10)


# --- (f) start lag at 80 % load ---------------------------------------------------------


async def _feed(shard_map: ShardMap, rate: float, seconds: float) -> int:
    conns = await _connect_all(shard_map)
    fed = 0
    tick = 0.02
    try:
        started = time.perf_counter()
        n = 0
        while time.perf_counter() - started < seconds:
            due = int(rate * (time.perf_counter() - started)) - fed
            if due > 0:
                conn = conns[n % len(conns)]
                n += 1
                async with conn.transaction():
                    await conn.execute(FEED, due, QUEUE)
                    await conn.execute(NOTIFY, QUEUE)
                fed += due
            await asyncio.sleep(tick)
    finally:
        for conn in conns:
            await conn.close()
    return fed


async def _lags(
    shard_map: ShardMap, tenant: str, jobs: list[str], skip_seconds: float = 0.0
) -> dict[int, list[float]]:
    found: dict[int, list[float]] = {0: [], 1: [], 2: []}
    for conn in await _connect_all(shard_map):
        for row in await conn.fetch(START_LAGS, tenant, jobs, skip_seconds):
            found[row["priority"]].append(max(row["lag"].total_seconds(), 0.0))
        await conn.close()
    return found


async def _ready_left(shard_map: ShardMap) -> int:
    left = 0
    for conn in await _connect_all(shard_map):
        left += await conn.fetchval("SELECT count(*) FROM live_runs WHERE state = 'ready'")
        await conn.close()
    return left


def start_lag(
    pool: Pool,
    url: str,
    shard_map: ShardMap,
    max_rate: float,
    seconds: float,
    *,
    settle: bool = True,
) -> dict[int, list[float]]:
    """Feed ready runs at 80 % of ``max_rate`` for ``seconds`` to the 4 SDK processes of
    ``pool`` (terminated afterwards); the lags of the runs made ready after a warm-up
    (the processes are up and leasing), when ``settle``."""
    asyncio.run(clear(shard_map))
    rate = 0.8 * max_rate
    warm_up = 3.0 if settle else 0.0
    try:
        pool.map_async(sdk_process, [(url, 100, seconds + warm_up + 30, WORKER, QUEUE)] * 4)
        time.sleep(warm_up)  # the processes are up and long-polling
        asyncio.run(clear(shard_map))
        asyncio.run(_feed(shard_map, rate, seconds + warm_up))
        deadline = time.monotonic() + 30
        while asyncio.run(_ready_left(shard_map)) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        pool.terminate()
        pool.join()
    return asyncio.run(_lags(shard_map, "bench", ["lag"], skip_seconds=warm_up))


# --- (g) fairness -----------------------------------------------------------------------


async def _fairness_phase(
    url: str, shard_map: ShardMap, flood: int, seconds: float, settle: bool
) -> list[float]:
    """B's start lags (s) while B enqueues 10 critical runs/s, with A's flood or not;
    with ``settle``, once A's runs hold their slots, and until B's last runs started."""
    await clear(shard_map)
    async with api_session(TEAM_A) as a, api_session(TEAM_B) as b:
        await put_job(a, url, "slow", {"queue": QUEUE, "priority": "bulk", "concurrency": 50})
        await put_job(b, url, "urgent", {"queue": QUEUE, "priority": "critical"})
        if flood:
            await preload(
                shard_map,
                flood,
                tenant="a",
                job="slow",
                priority=2,
                concurrency=50,
                everywhere=False,
            )

        async def slow(_context: RunContext) -> None:
            await asyncio.sleep(1.0)

        worker = Worker(
            url, ADMIN, queues=[QUEUE], concurrency=60, wait_seconds=5, lease_seconds=60
        )
        worker.register(slow, job="slow")
        worker.register(lambda _context: None, job="urgent")
        task = asyncio.create_task(worker.run())
        try:
            if settle:
                await asyncio.sleep(2.0)  # A's runs fill their 50 slots
            started = time.perf_counter()
            sent = 0
            while time.perf_counter() - started < seconds:
                async with b.post(f"{url}/v1/jobs/urgent/runs", data=b"{}") as answer:
                    await answer.read()
                sent += 1
                await asyncio.sleep(max(0.0, started + sent / 10 - time.perf_counter()))
            if settle:
                await asyncio.sleep(1.0)
        finally:
            worker.stop(force=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
    return (await _lags(shard_map, "b", ["urgent"]))[0]


def fairness(
    url: str, shard_map: ShardMap, seconds: float, *, settle: bool = True
) -> tuple[list[float], list[float]]:
    calm = asyncio.run(_fairness_phase(url, shard_map, 0, seconds, settle))
    flooded = asyncio.run(_fairness_phase(url, shard_map, scaled(FLOOD), seconds, settle))
    return calm, flooded


def fairness_ratio(calm: list[float], flooded: list[float]) -> float:
    """B's p99 start lag under A's flood over its p99 without, each read as at least
    ``FAIRNESS_LAG_FLOOR_S``."""
    floor = FAIRNESS_LAG_FLOOR_S
    return round(max(percentile(flooded, 0.99), floor) / max(percentile(calm, 0.99), floor), 2)


def _throughput_table(throughput: list[Row]) -> Table:
    return Table(
        "(c) lease + complete through HTTP, worker SDK processes, no-op handler (4 shards)",
        throughput,
        notes=[
            "ceiling: the raw loop (a), measured just before each row",
            "us/run: CPU time per run of PostgreSQL's processes, the dispatcher and the "
            "worker processes (bench.cpu); CPUs busy: the share of the machine's CPUs "
            "they used together",
        ],
    )


async def _checkpoint(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("CHECKPOINT")
    except asyncpg.InsufficientPrivilegeError:
        pass  # a server of someone else's (TICKWORK_BENCH_DATABASE_URL): measured as it is
    finally:
        await conn.close()


def _wakeup_figures(context: Context, url: str, shard_map: ShardMap) -> Table:
    figures = context.figures
    samples = wakeup_samples()
    asyncio.run(clear(shard_map))
    # Idle means idle: the loads before this one left dirty pages and WAL whose
    # checkpoint would otherwise land in the middle of the samples, stalling commits.
    asyncio.run(_checkpoint(context.database_url))
    commits = asyncio.run(ceiling.commit_latency(context.database_url, samples))
    idle_commits = asyncio.run(
        ceiling.commit_latency(context.database_url, samples, pause=wakeups.IDLE_SECONDS)
    )
    with wakeups.bare_server(context.database_url) as bare_url:
        bare = asyncio.run(wakeups.bare_wakeups(context.database_url, bare_url, samples))
        hop = asyncio.run(wakeups.idle_round_trips(bare_url, samples))
    parts = asyncio.run(wakeup(url, samples))
    reference = asyncio.run(lease_calls(url, samples))
    waits, bare_waits = parts[0].seconds, bare[0].seconds
    figures["wakeup_p50_ms"] = round(percentile(waits, 0.5) * 1000, 2)
    figures["wakeup_p99_ms"] = round(percentile(waits, 0.99) * 1000, 2)
    figures["bare_wakeup_p50_ms"] = round(percentile(bare_waits, 0.5) * 1000, 2)
    figures["bare_wakeup_p99_ms"] = round(percentile(bare_waits, 0.99) * 1000, 2)
    figures["wakeup_p99_vs_bare"] = round(
        percentile(waits, 0.99) / max(percentile(bare_waits, 0.99), 1e-6), 2
    )
    figures["commit_p50_ms"] = round(percentile(commits, 0.5) * 1000, 2)
    figures["commit_p99_ms"] = round(percentile(commits, 0.99) * 1000, 2)
    # The least this path's shape takes here: the bare path, plus the enqueue's HTTP
    # hop and the claim's commit, each from idle (medians: they add up, p99s do not).
    shape = sum(percentile(s, 0.5) for s in (bare_waits, hop.seconds, idle_commits))
    figures["idle_http_p50_ms"] = round(percentile(hop.seconds, 0.5) * 1000, 2)
    figures["wakeup_shape_p50_ms"] = round(shape * 1000, 2)
    figures["wakeup_p50_vs_shape"] = round(percentile(waits, 0.5) / max(shape, 1e-6), 2)
    return Table(
        "(e) idle wake-up: enqueue call -> handler start, through the long-poll, in parts",
        wakeups.part_rows(
            [
                *parts,
                reference,
                *bare,
                wakeups.Part("baseline: one-row INSERT + COMMIT", commits),
                hop,
                wakeups.Part("reference: a one-row INSERT + COMMIT from idle", idle_commits),
            ]
        ),
        notes=[
            "a wake-up waits for at least two WAL flushes: the enqueue's, the claim's; "
            "the bare path's for one",
            "the claim's start is the dispatcher's clock (lease expiry less its length); "
            "the other times are the bench's, on the same machine",
            "measured after a CHECKPOINT: the earlier loads' writes are flushed before the samples",
            f"from idle: after {wakeups.IDLE_SECONDS * 1000:.0f} ms of quiet, as each wake-up; "
            "the bare path plus those two references is the least a wake-up through an HTTP "
            "enqueue and a claim takes here",
        ],
    )


def _best(throughput: list[Row]) -> Row:
    return next(
        r
        for r in throughput
        if r["worker processes"] == 4 and r["concurrency (lease batch)"] == 100
    )


def record_lease_figures(figures: dict[str, float], throughput: list[Row]) -> None:
    """The headline figures of (c): 4 processes at batch 100, its rate as a ratio to
    the raw loop, and the CPU each process spends per run, PostgreSQL's as a ratio to
    the raw loop's (the budgets of the summary)."""
    best = _best(throughput)
    figures["http_runs_per_s"] = best["http runs/s"]
    figures["http_vs_ceiling"] = best["vs ceiling"]
    for role, column in (("worker", "workers us/run"), ("dispatcher", "dispatcher us/run")):
        if best.get(column) is not None:
            figures[f"http_{role}_us_per_run"] = best[column]
    if best.get("PG us/run") and best.get("ceiling PG us/run"):
        figures["http_pg_us_per_run"] = best["PG us/run"]
        figures["http_pg_vs_ceiling_pg"] = round(best["PG us/run"] / best["ceiling PG us/run"], 2)


@register("http-lease", "(c) alone: lease + complete through HTTP", default=False, part_of="http")
def lease_case(context: Context) -> list[Table]:
    shard_map = asyncio.run(migrate(context.database_url))
    with dispatcher(context.database_url) as url, sdk_pool() as pool:
        throughput = lease_complete(pool, url, context.database_url, shard_map, context.seconds)
    record_lease_figures(context.figures, throughput)
    return [_throughput_table(throughput)]


@register(
    "http-wakeup", "(e) alone: idle wake-up through the long-poll", default=False, part_of="http"
)
def wakeup_case(context: Context) -> list[Table]:
    shard_map = asyncio.run(migrate(context.database_url))
    with dispatcher(context.database_url) as url:
        return [_wakeup_figures(context, url, shard_map)]


@register("http", "(c)-(g) through HTTP with the worker SDK, against raw-SQL baselines")
def http_case(context: Context) -> list[Table]:
    shard_map = asyncio.run(migrate(context.database_url))
    seconds = context.seconds
    figures = context.figures
    with dispatcher(context.database_url) as url, sdk_pool() as pool:
        throughput = lease_complete(pool, url, context.database_url, shard_map, seconds)
        record_lease_figures(figures, throughput)
        best = _best(throughput)

        enqueue_row = enqueue_figures(url, context.database_url, shard_map, seconds)
        figures["enqueue_runs_per_s"] = enqueue_row["http runs/s"]
        figures["enqueue_vs_ceiling"] = round(
            enqueue_row["http runs/s"] / enqueue_row["INSERT ... unnest runs/s"], 3
        )

        woken = _wakeup_figures(context, url, shard_map)

        lags = start_lag(
            pool, url, shard_map, best["http runs/s"], seconds * 2, settle=not context.smoke
        )
        lag_rows = []
        for rank, name in enumerate(("critical", "default", "bulk")):
            p99 = percentile(lags[rank], 0.99)
            figures[f"{name}_p99_start_lag_s"] = round(p99, 3)
            lag_rows.append(
                {
                    "priority": name,
                    "runs": len(lags[rank]),
                    "p50 s": round(percentile(lags[rank], 0.5), 3),
                    "p99 s": round(p99, 3),
                }
            )

        calm, flooded = fairness(url, shard_map, seconds * 2, settle=not context.smoke)
        figures["fairness_b_p99_lag_no_flood_s"] = round(percentile(calm, 0.99), 3)
        figures["fairness_b_p99_lag_s"] = round(percentile(flooded, 0.99), 3)
        figures["fairness_b_vs_no_flood"] = fairness_ratio(calm, flooded)
    return [
        _throughput_table(throughput),
        Table(
            "(d) batch enqueue through HTTP (1 000 runs a call, 2 clients)",
            [enqueue_row],
            notes=ENQUEUE_NOTES,
        ),
        woken,
        Table(
            f"(f) start lag (lease - ready) at 80 % of {best['http runs/s']:,} runs/s, "
            "4 SDK processes",
            lag_rows,
        ),
        Table(
            "(g) fairness: B enqueues 10 critical runs/s; A floods "
            f"{scaled(FLOOD):,} bulk runs of a 1 s job (concurrency 50), 60 worker slots",
            [
                {
                    "phase": "no flood",
                    "B runs": len(calm),
                    "p50 s": round(percentile(calm, 0.5), 3),
                    "p99 s": round(percentile(calm, 0.99), 3),
                },
                {
                    "phase": "A's flood",
                    "B runs": len(flooded),
                    "p50 s": round(percentile(flooded, 0.5), 3),
                    "p99 s": round(percentile(flooded, 0.99), 3),
                },
            ],
            notes=[
                "the ratio in the summary reads each p99 as at least "
                f"{FAIRNESS_LAG_FLOOR_S * 1000:.0f} ms: below that a lag is the "
                "dispatcher's pace, not a wait behind A"
            ],
        ),
    ]
