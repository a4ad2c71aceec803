"""(b) Claim + complete straight against the store, next to the raw-SQL ceiling (a).

One shard, N ready runs preloaded, then two workers (two asyncio tasks in this one
process, each with a claim connection and another, as a dispatcher has) loop
``leases.claim(batch)`` → ``leases.complete`` (all succeeded) until the shard is
drained. N is sized from a short calibration drain so that each measurement
lasts about ``--seconds``. The headline row is batch 100 with one tenant and one
priority, like the ceiling's table; the fairness row spreads the same work over 5
tenants and 3 priorities, so the claim merges 15 heads: that is the cost of fairness.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

import asyncpg

from bench import Context, Row, Table, ceiling, cpu, register
from bench.harness import percentile, scaled
from tickwork.core.records import Completed, Completion, Outcome, State
from tickwork.core.shards import Shard
from tickwork.store import database, leases

BATCHES = (1, 100)
CONNECTIONS = 2
QUEUE = "bench"
LEASE_SECONDS = 300
CALIBRATION_RUNS = {1: 1_000, 10: 5_000, 100: 20_000}
MAX_RUNS = 2_000_000

RESET = "TRUNCATE live_runs, finished_runs, attempts, audit_log, run_keys"
# Like API enqueues of $3 tenants x 50 jobs in $4 priorities, all ready now.
PRELOAD = """
INSERT INTO live_runs (tenant, job, queue, priority, state, origin, max_attempts,
                       retry_base, retry_max, timeout_seconds, due_at, ready_at,
                       created_at, updated_at)
SELECT 'tenant-' || (i % $3), 'job-' || (i % 50), $2, i % $4, 'ready', 'api', 3, 30, 1800,
       3600, now(), now(), now(), now()
FROM generate_series(1, $1) AS i
"""

# The same backlog with flow control on every run (as the enqueue's trigger sets it),
# limits high enough never to hold a run back: what a claim pays for the limited path.
FLOW = {
    "none": "",
    "rate limit": """
UPDATE live_runs SET concurrency = 2147483647, rate_key = 'job/' || job || chr(31),
                     rate_limit = 1000000, rate_period = 1
""",
    "keyed concurrency": """
UPDATE live_runs SET concurrency = 1000,
                     concurrency_key = 'job/' || job || chr(31) || (id % 20)
""",
}


@dataclass(frozen=True)
class Drain:
    runs: int
    seconds: float
    cycles: list[float]  # seconds per claim + complete round trip
    began: float = 0.0  # wall-clock (time.time()) when the drain started, for bench.cpu

    @property
    def rate(self) -> float:
        return self.runs / self.seconds


async def prepare(
    conn: asyncpg.Connection, runs: int, tenants: int, priorities: int, flow: str = "none"
) -> None:
    await conn.execute(RESET + ", rate_windows")
    await conn.execute(PRELOAD, runs, QUEUE, tenants, priorities)
    if FLOW[flow]:
        await conn.execute(FLOW[flow])
    await conn.execute("VACUUM ANALYZE live_runs")


async def drain(
    shard: Shard,
    batch: int,
    runs: int,
    tenants: int = 1,
    priorities: int = 1,
    *,
    preload: bool = True,
    flow: str = "none",
) -> Drain:
    """Preload ``runs`` ready runs (unless ``preload`` is False: ``prepare`` did), then
    time claim + complete until none is left."""
    if preload:
        setup = await database.connect(shard)
        try:
            await prepare(setup, runs, tenants, priorities, flow)
        finally:
            await setup.close()
    # Like a dispatcher: claims on a connection of generic plans, completions on another.
    claimers = [await database.connect(shard, claims=True) for _ in range(CONNECTIONS)]
    conns = [await database.connect(shard) for _ in range(CONNECTIONS)]
    cycles: list[list[float]] = [[] for _ in conns]

    async def worker(number: int) -> int:
        claimer, conn, mine = claimers[number], conns[number], cycles[number]
        done = 0
        while True:
            started = time.perf_counter()
            got = await leases.claim(
                claimer, shard.number, [QUEUE], batch, f"w{number}", LEASE_SECONDS
            )
            if not got:
                return done
            answers = await leases.complete(
                conn,
                shard.number,
                [Completion(lease.id, lease.fencing_token, Outcome.succeeded) for lease in got],
            )
            mine.append(time.perf_counter() - started)
            bad = [
                a for a in answers if not (isinstance(a, Completed) and a.state is State.succeeded)
            ]
            if bad:
                raise RuntimeError(f"completion refused: {bad[0]!r}")
            done += len(got)

    try:
        began = time.time()
        started = time.perf_counter()
        counts = await asyncio.gather(*(worker(n) for n in range(CONNECTIONS)))
        elapsed = time.perf_counter() - started
    finally:
        for conn in claimers + conns:
            await conn.close()
    if sum(counts) != runs:
        raise RuntimeError(f"drained {sum(counts)} runs of {runs}")
    return Drain(runs, elapsed, [c for per_worker in cycles for c in per_worker], began)


def _succeeded(answer: object) -> bool:
    return isinstance(answer, Completed) and answer.state is State.succeeded


@register("store", "(b) claim + complete straight against one shard, 2 connections, no HTTP")
async def claim_complete(context: Context) -> list[Table]:
    shard = (await context.migrate(1))[0]
    postgres = await cpu.postmaster(context.database_url)
    rows: list[Row] = []
    shapes = [(batch, 1, 1, "none") for batch in BATCHES] + [(100, 5, 3, "none")]
    shapes += [(100, 1, 1, flow) for flow in FLOW if flow != "none"]
    for batch, tenants, priorities, flow in shapes:
        calibrating = scaled(CALIBRATION_RUNS[batch], least=batch)
        calibration = await drain(shard, batch, calibrating, tenants, priorities, flow=flow)
        runs = int(calibration.rate * context.seconds)
        runs = max(calibrating, min(MAX_RUNS, runs - runs % batch))
        ceiling_rate, ceiling_pg = await ceiling.claim_complete_metered(
            context.database_url, context.seconds / 2, postgres
        )
        with cpu.metered({"postgres": [postgres]}, {"bench": os.getpid()}) as meter:
            result = await drain(shard, batch, runs, tenants, priorities, flow=flow)
        used = cpu.per_run(
            meter,
            result.began,
            result.began + result.seconds,
            result.rate,
            {"postgres": "PG us/run", "bench": "store client us/run"},
        )
        rows.append(
            {
                "batch": batch,
                "tenants x priorities": f"{tenants} x {priorities}",
                "flow control": flow,
                "runs": result.runs,
                "runs/s": round(result.rate),
                "ceiling runs/s": round(ceiling_rate),
                "vs ceiling": round(result.rate / ceiling_rate, 2),
                "cycle p50 ms": round(percentile(result.cycles, 0.5) * 1000, 2),
                "cycle p99 ms": round(percentile(result.cycles, 0.99) * 1000, 2),
                **used,
                "ceiling PG us/run": ceiling_pg,
            }
        )
        if flow != "none":
            key = "store_rate_limited_runs_per_s" if "rate" in flow else "store_keyed_runs_per_s"
            context.figures[key] = round(result.rate)
        elif batch == 100 and tenants == 1:
            context.figures["store_runs_per_s"] = round(result.rate)
            context.figures["store_vs_ceiling"] = round(result.rate / ceiling_rate, 3)
        if tenants > 1:
            context.figures["store_fair_vs_ceiling"] = round(result.rate / ceiling_rate, 3)
    return [
        Table(
            "(b) store: claim(batch) + complete(succeeded) on one shard, "
            f"{CONNECTIONS} connections, one process",
            rows,
            notes=[
                "a cycle is one claim and one completion of what it leased",
                "ceiling: the raw loop (a), batch 100, measured just before each row",
                "flow control: every run rate-limited (1 000 000 a second: never held back) or "
                "under a concurrency limit of 1000 per key (20 keys a job): the limited "
                "path's claim (lock_flow, then the claim) with nothing held back",
                "us/run: CPU time per run of PostgreSQL's processes and of this process "
                "(bench.cpu); CPUs busy: the share of the machine's CPUs they used",
            ],
        )
    ]
